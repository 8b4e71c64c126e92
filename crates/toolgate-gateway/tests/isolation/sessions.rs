//! (filled in by this area's tests)
