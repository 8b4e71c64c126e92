use toolgate_core::Pipeline;

struct Forgot;

fn main() {
    let _ = Pipeline::builder().tool(Forgot).build();
}
