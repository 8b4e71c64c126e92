//! How deep a policy file's expressions nest, measured before Cedar parses them.
//!
//! Cedar's parser and the walks over what it builds recurse once per level of an
//! expression, with no limit of their own: about a hundred nested parentheses overflow a
//! runtime worker's stack, and an overflowing stack aborts the process (a reload would take
//! the gateway down). So the text is measured first, and text deeper than [`MAX_DEPTH`]
//! is refused at the place it gets too deep.
//!
//! The measure is an upper bound of the depth of the tree Cedar builds: every bracket
//! (`(`, `[`, `{`) is a level; inside one, every `if`, `&&` and `||` is a level until the
//! bracket closes (Cedar nests a chain of `||` one level a term, and its evaluator and the
//! drop of a policy set recurse through it: a 31-term `||` already fails to evaluate on a
//! 2 MiB stack in a debug build, and 20,000 terms overflow a release build's stack when
//! the set is dropped), and every operator (`.`, `+`, `-`, `*`, `!`, comparisons, `has`,
//! `like`, `in`, `is`) is a level until the next `&&`, `||`, `,`, `:`, `then` or `else`,
//! which start a new operand. Strings and `//` comments are skipped.

/// How deep an expression may nest: far more than any policy a person writes, and
/// little enough that Cedar never comes near the end of a stack.
pub const MAX_DEPTH: usize = 32;

/// One open bracket (or the text outside every bracket) and what nests in it so far.
#[derive(Default)]
struct Level {
    /// The `if`s, `&&`s and `||`s since the bracket opened.
    joins: usize,
    /// The operators since the operand began.
    operators: usize,
}

impl Level {
    fn depth(&self) -> usize {
        1 + self.joins + self.operators
    }
}

/// Where `text` first nests deeper than [`MAX_DEPTH`], if it does: the byte offset of
/// the bracket, `if` or operator that goes past it.
pub(crate) fn too_deep(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut levels = vec![Level::default()];
    // The sum of the open levels' depths, kept as they change.
    let mut depth = 1;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let byte = bytes[i];
        i += 1;
        let top = levels.len() - 1;
        let added = match byte {
            b'"' => {
                // A string: up to the closing quote not escaped by `\`.
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                0
            }
            b'/' if bytes.get(i) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                0
            }
            b'(' | b'[' | b'{' => {
                levels.push(Level::default());
                1
            }
            b')' | b']' | b'}' => {
                if levels.len() > 1
                    && let Some(closed) = levels.pop()
                {
                    depth -= closed.depth();
                }
                0
            }
            // `::` of an entity's type is part of a name: no new operand.
            b':' if bytes.get(i) == Some(&b':') => {
                i += 1;
                0
            }
            b'&' | b'|' | b',' | b':' => {
                let joins = matches!(byte, b'&' | b'|') && bytes.get(i) == Some(&byte);
                if joins {
                    i += 1;
                    levels[top].joins += 1;
                }
                depth -= levels[top].operators;
                levels[top].operators = 0;
                usize::from(joins)
            }
            b'=' | b'!' | b'<' | b'>' => {
                if bytes.get(i) == Some(&b'=') {
                    i += 1;
                }
                levels[top].operators += 1;
                1
            }
            b'.' | b'+' | b'-' | b'*' => {
                levels[top].operators += 1;
                1
            }
            b if b.is_ascii_alphabetic() || b == b'_' => {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                match &text[start..i] {
                    "if" => {
                        levels[top].joins += 1;
                        1
                    }
                    "then" | "else" => {
                        depth -= levels[top].operators;
                        levels[top].operators = 0;
                        0
                    }
                    "has" | "like" | "in" | "is" => {
                        levels[top].operators += 1;
                        1
                    }
                    _ => 0,
                }
            }
            _ => 0,
        };
        depth += added;
        if depth > MAX_DEPTH {
            return Some(start);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(open: &str, close: &str, n: usize) -> String {
        format!(
            "permit(principal, action, resource) when {{ {}context.a == \"boom\"{} }};",
            open.repeat(n),
            close.repeat(n)
        )
    }

    #[test]
    fn policies_as_people_write_them_are_not_too_deep() {
        let text = r#"
// Staff may echo, but never SQL that drops a table (")").
@id("staff-echo")
permit(principal, action in [Action::"echo", Action::"calculator"], resource)
when {
    (principal.roles.contains("staff") || principal.tenant == "acme")
    && context.arguments.text like "*(((((*"
    && (if context has transport then context.transport == "mcp" else true)
    && {a: [1, 2], b: {c: decimal("1.5")}}.b.c.lessThan(decimal("2.0"))
    && !(context.arguments.count + 1 * 2 - 3 >= 4)
};
"#;
        assert_eq!(too_deep(text), None);
        assert_eq!(too_deep(&nested("(", ")", MAX_DEPTH - 8)), None);
    }

    #[test]
    fn brackets_deeper_than_the_limit_are_found_where_they_get_too_deep() {
        for (open, close) in [("(", ")"), ("[", "]"), ("{a: ", "}")] {
            let text = nested(open, close, 10 * MAX_DEPTH);
            let at = too_deep(&text).expect("too deep");
            // The 32nd opening bracket: the text outside them and `when {` are two levels.
            let first = text.find("when { ").unwrap() + "when { ".len();
            assert_eq!(at, first + (MAX_DEPTH - 2) * open.len(), "{open}");
        }
    }

    #[test]
    fn long_chains_of_operators_and_of_and_and_or_count() {
        let chain = |op: &str, n: usize| {
            format!(
                "permit(principal, action, resource) when {{ {} }};",
                vec!["1"; n].join(op)
            )
        };
        assert!(too_deep(&chain(" + ", 1000)).is_some());
        assert!(too_deep(&chain(" * ", 1000)).is_some());
        assert!(too_deep(&chain(" == 1 && 1", 1000)).is_some());
        assert!(too_deep(&chain(" == 1 || 1", 1000)).is_some());
        // A block list of 29 comparisons joined by `||` is what still loads (the text
        // outside, the `when` block, 28 joins, and the last comparison's `.` and `==`: 32
        // levels); one more is refused. A set and `.contains` say the same thing flat.
        let listed = |n: usize| {
            let terms: Vec<String> = (0..n).map(|k| format!("context.a == \"v{k}\"")).collect();
            format!(
                "permit(principal, action, resource) when {{ {} }};",
                terms.join(" || ")
            )
        };
        assert!(too_deep(&listed(29)).is_none());
        assert!(too_deep(&listed(30)).is_some());
        let set: Vec<String> = (0..1000).map(|k| format!("\"v{k}\"")).collect();
        let contains = format!(
            "permit(principal, action, resource) when {{ [{}].contains(context.a) }};",
            set.join(", ")
        );
        assert!(too_deep(&contains).is_none());
        let members = format!(
            "permit(principal, action, resource) when {{ context{} }};",
            ".a".repeat(1000)
        );
        assert!(too_deep(&members).is_some());
        let else_ifs = format!(
            "permit(principal, action, resource) when {{ {}true }};",
            "if false then false else ".repeat(1000)
        );
        assert!(too_deep(&else_ifs).is_some());
        // Entity names do not start a new operand.
        assert!(too_deep(&chain(" + ", 1000).replace('1', "Tool::\"1\"")).is_some());
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let deep = "(".repeat(10 * MAX_DEPTH);
        let text = format!(
            "// {deep}\npermit(principal, action, resource) when {{ context.a == \"\\\"{deep}\" }};"
        );
        assert_eq!(too_deep(&text), None);
    }

    #[test]
    fn text_at_the_limit_parses_on_a_small_stack() {
        // The smallest stack Cedar could meet: a runtime worker's 2 MiB, in a debug build.
        let mut depth = 1;
        while too_deep(&nested("(", ")", depth + 1)).is_none() {
            depth += 1;
        }
        let text = nested("(", ")", depth);
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let set: cedar_policy::PolicySet = text.parse().expect("it parses");
                drop(set);
            })
            .unwrap()
            .join()
            .expect("no overflow");
    }
}
