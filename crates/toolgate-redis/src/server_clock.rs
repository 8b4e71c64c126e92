//! The start that the scripts of the suspension and session stores share
//! (`server_clock.lua`): `now`, the Redis server's clock in milliseconds, and `extend`.

use redis::Script;

/// A script made of the shared start, then `parts` in order.
pub(crate) fn script(parts: &[&str]) -> Script {
    let mut source = String::from(include_str!("server_clock.lua"));
    for part in parts {
        source.push('\n');
        source.push_str(part);
    }
    Script::new(&source)
}
