//! What `#[hook]` accepts and what it refuses, compiled by `trybuild`: each file under
//! `ui/pass` must compile and run, each under `ui/fail` must fail with the message kept
//! beside it in a `.stderr` file.

#[test]
fn hook_attribute_accepts_every_form_and_explains_every_mistake() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
