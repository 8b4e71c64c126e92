use toolgate_core::Stage;
use toolgate_core::hook::hook_fn_sync;

fn main() {
    // A sync closure hook must return a result.
    let _ = hook_fn_sync(Stage::WillAuthorize, |_ctx| {});
}
