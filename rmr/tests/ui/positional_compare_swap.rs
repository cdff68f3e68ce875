// compare and swap are named: there is no positional form to swap them in.
fn main() {
    let _op = rmr::CompareSwap(0, 1);
}
