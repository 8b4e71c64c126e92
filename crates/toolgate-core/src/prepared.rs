//! [`PreparedInput`]: what a tool's own check parsed, kept for its first attempt.

use std::any::Any;

/// An input that a tool's own check already parsed, kept so the first attempt does not
/// parse again.
pub struct PreparedInput(Box<dyn Any + Send + Sync>);

impl PreparedInput {
    /// Wraps a parsed input.
    #[inline]
    pub fn new<T: Send + Sync + 'static>(value: T) -> Self {
        PreparedInput(Box::new(value))
    }

    /// The parsed input, if it is a `T`.
    #[inline]
    pub fn downcast<T: 'static>(self) -> Option<T> {
        self.0.downcast::<T>().ok().map(|b| *b)
    }
}
