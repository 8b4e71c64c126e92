//! How deep a policy file's expressions nest, measured before Cedar parses them.
//!
//! Cedar's parser, its evaluator and the drop of what it builds recurse once per level of
//! an expression, with no limit of their own, and an overflowing stack aborts the process
//! (a reload would take the gateway down). So the text is measured first, and text that
//! costs more than [`MAX_DEPTH`] levels is refused at the place it gets too deep.
//!
//! What a level costs, measured with Cedar 4.14 in a debug build (each construct nested
//! alone until the stack overflowed):
//!
//! | construct                                  | parsed on 2 MiB | parsed on 64 MiB | dropped on 2 MiB | evaluated on 2 MiB |
//! |--------------------------------------------|-----------------|------------------|------------------|--------------------|
//! | brackets `(`, `[`, `{a: `                  | 35–37 deep      | 1,150–1,230      | all that parse   | ~33                |
//! | `if … then … else if …`                    | ~385            | ≥ 11,800         | ~11,800          | ~32                |
//! | `.a`, `.m(…)`, `+`, `*`, `&&`, `\|\|`, `has` | ≥ 380,000       | ≥ 380,000        | ~11,800          | 31–35              |
//!
//! A bracket costs the parser about 56 KiB of stack, an `if` about 5.5 KiB, and everything
//! else next to nothing: the parser reads chains of operators in a loop. But every
//! operator, member access, method call, `&&`, `||` and `if` is a level of the tree Cedar
//! builds, and dropping it costs about 180 bytes of stack a level: on a runtime worker's
//! 2 MiB (where an old policy set may be dropped after a reload) about 11,800 levels
//! overflow, whatever the construct. Cedar's evaluator and validator never overflow: they
//! stop where less than 100 KiB of stack is left, and the policy counts as failed (a call
//! it would permit is denied, and the failure is logged). In a debug build that is about
//! 32 levels of any kind on a 2 MiB worker; a release build's frames are far smaller. So
//! a decision runs where the stack has room for the set's deepest expression
//! ([`evaluation_stack`]): in place when the calling thread has that much left, on a stack
//! of its own made for the decision otherwise — only for sets that nest deep.
//! (`!` and `-` in a row, and relational operators in a row, are refused by Cedar itself.)
//!
//! So a bracket counts [`BRACKET`] levels and an `if` [`IF`], everything else one: text
//! at the limit parses on 2 MiB (the loader has 64 MiB), and its tree is a sixth of what
//! overflows a worker's stack when it is dropped. A 40-segment member path costs 40 of the
//! 2,048 levels; a block list of a thousand comparisons joined by `||` loads.

//! The measure is an upper bound of that cost along any path of the tree: every bracket
//! is [`BRACKET`] levels; inside one, every `if` is [`IF`] levels and every `&&` and `||`
//! one, until the bracket closes (Cedar nests a chain of `||` one level a term); every
//! operator (`.`, `+`, `-`, `*`, `!`, comparisons, `has`, `like`, `in`, `is`) is a level
//! until the next `&&`, `||`, `,`, `:`, `then` or `else`, which start a new operand.
//! Strings and `//` comments are skipped.

/// How many levels an expression may cost: far more than any policy a person writes
/// (32 brackets, 256 `if`s or 2,048 operators), and little enough that Cedar never comes
/// near the end of a stack.
pub const MAX_DEPTH: usize = 2048;

/// What a bracket (`(`, `[`, `{`) costs, in levels: Cedar's parser needs about as much
/// stack for one as for 300 operators.
pub(crate) const BRACKET: usize = 64;

/// What an `if` costs, in levels.
pub(crate) const IF: usize = 8;

/// One open bracket (or the text outside every bracket) and what nests in it so far.
#[derive(Default)]
struct Level {
    /// The bracket's own cost and that of the `if`s, `&&`s and `||`s since it opened.
    joins: usize,
    /// The operators since the operand began.
    operators: usize,
}

impl Level {
    fn depth(&self) -> usize {
        self.joins + self.operators
    }
}

/// Where `text` first nests deeper than [`MAX_DEPTH`], if it does: the byte offset of
/// the bracket, `if` or operator that goes past it.
pub(crate) fn too_deep(text: &str) -> Option<usize> {
    scan(text, BRACKET, IF, MAX_DEPTH).err()
}

/// How many levels of Cedar's evaluator `text`'s deepest expression takes at most: its
/// nesting with every bracket, `if` and operator one level. What a decision over it needs
/// of the stack ([`evaluation_stack`]).
pub(crate) fn evaluation_levels(text: &str) -> usize {
    scan(text, 1, 1, usize::MAX).unwrap_or(usize::MAX)
}

/// What Cedar's evaluator needs of the stack, in a debug build (the larger frames), for
/// each level of an expression: about 2 MiB holds 32 ([the module](self)).
const EVALUATION_LEVEL_BYTES: usize = 64 * 1024;

/// The stack Cedar's evaluator stops short of (it fails a policy where less than 100 KiB
/// is left), and a margin for the frames above it.
const EVALUATION_BASE_BYTES: usize = 256 * 1024;

/// The stack a decision over policies whose deepest expression is `levels` deep needs.
pub(crate) fn evaluation_stack(levels: usize) -> usize {
    levels
        .saturating_mul(EVALUATION_LEVEL_BYTES)
        .saturating_add(EVALUATION_BASE_BYTES)
}

/// Measures `text` with a bracket costing `bracket` levels and an `if` `if_cost`: the
/// deepest it nests, or the offset where it first goes past `limit`.
fn scan(text: &str, bracket: usize, if_cost: usize, limit: usize) -> Result<usize, usize> {
    let mut deepest = 0;
    let bytes = text.as_bytes();
    let mut levels = vec![Level::default()];
    // The sum of the open levels' depths, kept as they change.
    let mut depth = 0;
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
                levels.push(Level {
                    joins: bracket,
                    operators: 0,
                });
                bracket
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
                        levels[top].joins += if_cost;
                        if_cost
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
        if depth > limit {
            return Err(start);
        }
        deepest = deepest.max(depth);
    }
    Ok(deepest)
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

    fn when(condition: &str) -> String {
        format!("permit(principal, action, resource) when {{ {condition} }};")
    }

    /// `n` copies of `term` joined by `join`.
    fn chain(term: &str, join: &str, n: usize) -> String {
        vec![term; n].join(join)
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
        assert_eq!(too_deep(&nested("(", ")", 24)), None);
    }

    #[test]
    fn a_long_member_path_and_long_chains_of_conditions_are_not_too_deep() {
        let path = format!("context{} == 1", ".a".repeat(40));
        assert_eq!(too_deep(&when(&path)), None);
        let ands = chain("context.a.b.c == 1", " && ", 200);
        assert_eq!(too_deep(&when(&ands)), None);
        let else_ifs = format!("{}true", "if context.a == 1 then false else ".repeat(20));
        assert_eq!(too_deep(&when(&else_ifs)), None);
        // A block list of comparisons joined by `||`: the `when` block (64), a level a
        // join, and the last comparison's `.` and `==`.
        let listed = |n: usize| {
            let terms: Vec<String> = (0..n).map(|k| format!("context.a == \"v{k}\"")).collect();
            when(&terms.join(" || "))
        };
        let most = MAX_DEPTH - BRACKET - 1;
        assert!(too_deep(&listed(most)).is_none());
        assert!(too_deep(&listed(most + 1)).is_some());
    }

    #[test]
    fn brackets_deeper_than_the_limit_are_found_where_they_get_too_deep() {
        for (open, close) in [("(", ")"), ("[", "]"), ("{a: ", "}")] {
            let text = nested(open, close, 10 * MAX_DEPTH / BRACKET);
            let at = too_deep(&text).expect("too deep");
            // The 32nd bracket, counting the `when` block's.
            let first = text.find("when { ").unwrap() + "when { ".len();
            assert_eq!(at, first + (MAX_DEPTH / BRACKET - 1) * open.len(), "{open}");
        }
    }

    #[test]
    fn long_chains_of_operators_ifs_and_joins_count() {
        let long = 2 * MAX_DEPTH;
        for (term, join) in [
            ("1", " + "),
            ("1", " * "),
            ("context.a == 1", " && "),
            ("context.a == 1", " || "),
            ("context has a", " && "),
        ] {
            assert!(
                too_deep(&when(&chain(term, join, long))).is_some(),
                "{join}"
            );
        }
        let members = format!("context{} == 1", ".a".repeat(long));
        assert!(too_deep(&when(&members)).is_some());
        let methods = format!("context.s{}", ".contains(1)".repeat(long));
        assert!(too_deep(&when(&methods)).is_some());
        let else_ifs = format!("{}true", "if false then false else ".repeat(long / IF));
        assert!(too_deep(&when(&else_ifs)).is_some());
        // Entity names do not start a new operand.
        assert!(too_deep(&when(&chain("Tool::\"1\"", " + ", long))).is_some());
        // A set and `.contains` say what a long `||` says, flat.
        let set: Vec<String> = (0..10_000).map(|k| format!("\"v{k}\"")).collect();
        let contains = format!("[{}].contains(context.a)", set.join(", "));
        assert!(too_deep(&when(&contains)).is_none());
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let deep = "(".repeat(10 * MAX_DEPTH);
        let text = format!(
            "// {deep}\npermit(principal, action, resource) when {{ context.a == \"\\\"{deep}\" }};"
        );
        assert_eq!(too_deep(&text), None);
    }

    /// The longest text `make(n)` makes that is not too deep.
    fn at_the_limit(make: impl Fn(usize) -> String) -> String {
        let mut n = 1;
        while too_deep(&make(n + 1)).is_none() {
            n += 1;
        }
        make(n)
    }

    #[test]
    fn text_at_the_limit_parses_evaluates_and_drops_on_a_small_stack() {
        use cedar_policy::{
            Authorizer, Context, Entities, EntityUid, PolicySet, Request, RequestBuilder,
        };
        use std::str::FromStr;
        let texts = [
            at_the_limit(|n| nested("(", ")", n)),
            at_the_limit(|n| nested("[", "]", n)),
            at_the_limit(|n| nested("{a: ", "}", n)),
            at_the_limit(|n| {
                nested("(", ")", n).replace("context.a", "context.s.contains(context.a)")
            }),
            at_the_limit(|n| {
                when(&format!(
                    "{}true",
                    "if context.a == 2 then false else ".repeat(n)
                ))
            }),
            at_the_limit(|n| when(&chain("context.a == 1", " && ", n))),
            at_the_limit(|n| when(&chain("context.a == 2", " || ", n))),
            at_the_limit(|n| when(&format!("context{} == 1", ".a".repeat(n)))),
            at_the_limit(|n| when(&format!("context.s{}", ".contains(1)".repeat(n)))),
            at_the_limit(|n| when(&(chain("1", " + ", n) + " == 1"))),
            // Brackets, then as many operators as are left inside them.
            at_the_limit(|n| {
                when(&format!(
                    "{}{}{}",
                    "(".repeat(16),
                    chain("context.a == 1", " && ", n),
                    ")".repeat(16)
                ))
            }),
        ];
        for text in texts {
            let shown = text.chars().take(80).collect::<String>();
            // The smallest stack Cedar could meet: a runtime worker's 2 MiB, in a debug build.
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || {
                    let set = PolicySet::from_str(&text).expect("it parses");
                    let uid = |s: &str| EntityUid::from_str(s).unwrap();
                    let context = Context::from_json_str(r#"{"a": 1, "s": [1]}"#, None).unwrap();
                    let request = Request::new(
                        uid("User::\"u\""),
                        uid("Action::\"call\""),
                        uid("Tool::\"t\""),
                        context,
                        None,
                    )
                    .unwrap();
                    let authorizer = Authorizer::new();
                    drop(authorizer.is_authorized(&request, &set, &Entities::empty()));
                    let partial = RequestBuilder::default()
                        .principal(uid("User::\"u\""))
                        .action(uid("Action::\"call\""))
                        .resource(uid("Tool::\"t\""))
                        .build();
                    drop(authorizer.is_authorized_partial(&partial, &set, &Entities::empty()));
                    drop(set);
                })
                .unwrap()
                .join()
                .unwrap_or_else(|_| panic!("{shown}…"));
        }
    }
}
