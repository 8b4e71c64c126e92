//! The registry: tools by name, type-erased behind JSON.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::definition::ToolDefinition;
use crate::error::RegistryError;
use crate::tool::{ErasedTool, Tool, Typed};

/// A typed handle on a registered tool, for [`Pipeline::invoke_typed`](crate::Pipeline::invoke_typed).
pub struct ToolRef<I, O> {
    name: Arc<str>,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> ToolRef<I, O> {
    /// The handle of `tool`, to take before registering it.
    ///
    /// ```
    /// use toolgate_core::registry::ToolRef;
    /// use toolgate_core::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ping = tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong".to_owned()) });
    /// let handle = ToolRef::of(&ping);
    /// let pipeline = Pipeline::builder().tool(ping).build()?;
    /// assert_eq!(pipeline.invoke_typed(&handle, (), InvokeOptions::new()).await?, "pong");
    /// # Ok(()) }
    /// ```
    pub fn of<T>(tool: &T) -> Self
    where
        T: Tool<Input = I, Output = O>,
    {
        ToolRef {
            name: Arc::from(tool.name()),
            _types: PhantomData,
        }
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<I, O> Clone for ToolRef<I, O> {
    fn clone(&self) -> Self {
        ToolRef {
            name: Arc::clone(&self.name),
            _types: PhantomData,
        }
    }
}

impl<I, O> std::fmt::Debug for ToolRef<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ToolRef").field(&self.name).finish()
    }
}

/// A registered tool: its definition (computed once) and the erased tool.
#[derive(Clone)]
pub struct RegisteredTool {
    /// The definition listed to callers.
    pub definition: ToolDefinition,
    /// The tool.
    pub tool: Arc<dyn ErasedTool>,
}

/// The tools a pipeline can call, by unique name, in registration order.
///
/// ```
/// use toolgate_core::registry::ToolRegistry;
/// use toolgate_core::{tool_fn, ToolError};
///
/// let mut registry = ToolRegistry::new();
/// registry.register(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))?;
/// let again = registry.register(tool_fn("ping", "Another.", |_: ()| async { Ok::<_, ToolError>("pong") }));
/// assert!(again.is_err());
/// assert_eq!(registry.definitions().count(), 1);
/// # Ok::<(), toolgate_core::error::RegistryError>(())
/// ```
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<RegisteredTool>,
    /// Looked up on every invocation. foldhash (randomly seeded) instead of SipHash: the
    /// map is fixed once the pipeline is built, so callers' names cannot flood it.
    by_name: HashMap<String, usize, foldhash::fast::RandomState>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a typed tool.
    ///
    /// # Errors
    ///
    /// [`RegistryError::DuplicateTool`] if the name is taken, [`RegistryError::InvalidName`]
    /// if model providers would refuse it.
    pub fn register<T: Tool>(
        &mut self,
        tool: T,
    ) -> Result<ToolRef<T::Input, T::Output>, RegistryError> {
        let name = self.register_erased(Arc::new(Typed(tool)))?;
        Ok(ToolRef {
            name: Arc::from(name),
            _types: PhantomData,
        })
    }

    /// Registers a type-erased tool (a [`JsonTool`](crate::JsonTool), an imported tool).
    /// Returns the name it was registered under.
    ///
    /// # Errors
    ///
    /// As [`register`](Self::register).
    pub fn register_erased(&mut self, tool: Arc<dyn ErasedTool>) -> Result<&str, RegistryError> {
        let definition = tool.definition();
        let name = definition.name.clone();
        if !is_valid_name(&name) {
            return Err(RegistryError::InvalidName { name });
        }
        if self.by_name.contains_key(&name) {
            return Err(RegistryError::DuplicateTool { name });
        }
        self.by_name.insert(name, self.tools.len());
        self.tools.push(RegisteredTool { definition, tool });
        Ok(&self.tools[self.tools.len() - 1].definition.name)
    }

    /// Whether `name` can be a tool's name: 1 to 64 ASCII letters, digits, `_`, `-` and
    /// `.` (what model providers accept), and not `.` or `..` alone (which a URL path
    /// resolves away).
    ///
    /// ```
    /// use toolgate_core::registry::ToolRegistry;
    /// assert!(ToolRegistry::is_valid_name("files.read"));
    /// assert!(!ToolRegistry::is_valid_name("read file"));
    /// assert!(!ToolRegistry::is_valid_name(".."));
    /// ```
    pub fn is_valid_name(name: &str) -> bool {
        is_valid_name(name)
    }

    /// The tool registered under `name`.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Every tool's definition, in registration order.
    pub fn definitions(&self) -> impl ExactSizeIterator<Item = &ToolDefinition> {
        self.tools.iter().map(|t| &t.definition)
    }

    /// Every registered tool, in registration order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &RegisteredTool> {
        self.tools.iter()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// The longest tool name, in characters (all ASCII): what model providers accept.
pub const MAX_NAME_LEN: usize = 64;

/// Whether a tool name may hold `c`: an ASCII letter or digit, `_`, `-` or `.`, the
/// characters model providers accept.
///
/// ```
/// use toolgate_core::registry::is_name_character;
/// assert!("files.read_2-b".chars().all(is_name_character));
/// assert!(!is_name_character(' ') && !is_name_character('\0') && !is_name_character('é'));
/// ```
pub fn is_name_character(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// 1 to 64 characters that model providers accept; never `.` or `..` alone, which a
/// URL path (`/v1/tools/{name}`) takes for "this folder" and "the folder above", so a
/// browser or proxy would resolve them away before the request arrives.
fn is_valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name != "."
        && name != ".."
        && name.chars().all(is_name_character)
}
