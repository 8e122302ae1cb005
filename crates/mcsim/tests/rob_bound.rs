//! The `rob_bound` example's recurrences (the core model's ROB in closed form, `rob::Rob`, the
//! cheapest evaluation of it measured in docs/mcsim-speed.md) must stay the engine's model: on one core
//! with the ideal memory, where the engine is exactly that model, its cycles, instructions and
//! served accesses must equal the recurrences' on every kernel, machine and random stream the
//! check covers (sizes capped for the test; the example runs bigger ones by hand).

#[allow(dead_code)]
#[path = "../examples/rob_bound.rs"]
mod rob_bound;

#[test]
fn recurrences_equal_the_engine_on_one_core() {
    rob_bound::check(300).expect("every run the same");
}
