//! Mistakes the types turn into compile errors: using or freeing a buffer
//! after it became registrable memory, taking it back while registrations
//! hold it, and passing one integer where another kind is expected.
#[test]
#[cfg_attr(miri, ignore)] // runs rustc
fn mistakes_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
