use toolgate_core::hook;

struct Plain;

#[hook]
impl Plain {
    fn will_authorize(&self) {}
}

fn main() {}
