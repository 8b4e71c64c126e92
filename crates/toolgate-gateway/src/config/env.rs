//! `${VAR}` references in configuration values.

/// Replaces `${VAR}` with the environment variable `VAR` and `${VAR:-default}` with
/// `default` when `VAR` is unset or empty. `$$` is a literal `$`.
///
/// # Errors
///
/// A message naming the variable when one is unset and has no default, or when a
/// reference is not closed.
///
/// # Examples
///
/// ```
/// use toolgate_gateway::config::expand_env;
///
/// assert_eq!(expand_env("redis://${TOOLGATE_DOC_UNSET:-127.0.0.1}:6379")?, "redis://127.0.0.1:6379");
/// assert_eq!(expand_env("price: $$5")?, "price: $5");
/// assert!(expand_env("${TOOLGATE_DOC_UNSET}").is_err());
/// # Ok::<(), String>(())
/// ```
pub fn expand_env(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or_else(|| {
                format!("`${{` without a closing `}}` in `{}`", redact_hint(text))
            })?;
            let reference = &body[..end];
            let (name, default) = match reference.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (reference, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "`${{{reference}}}` is not a variable reference: write `${{NAME}}` or `${{NAME:-default}}`"
                ));
            }
            match (std::env::var(name).ok().filter(|v| !v.is_empty()), default) {
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => {
                    return Err(format!(
                        "environment variable `{name}` is not set: export it, or give a default with `${{{name}:-default}}`"
                    ));
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

// The raw text holds references, not secrets, but keep messages short.
fn redact_hint(text: &str) -> String {
    text.chars().take(40).collect()
}
