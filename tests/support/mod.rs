pub mod kata;
pub mod node;
