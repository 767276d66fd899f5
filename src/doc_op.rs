// The operation of the purgatory's doc examples (included by them, not a module of the
// crate): it never completes by itself, and waits up to 500 ms.
struct Op;
impl timingwheel::DelayedOperation for Op {
    fn delay_ms(&self) -> i64 {
        500
    }
    fn try_complete(&self) -> bool {
        false
    }
    fn on_complete(&self) {}
    fn on_expiration(&self) {}
}
