//! Checks of the repository itself, on its files rather than on a running server: the floor
//! plan of `src/` (`layering`: no import runs back up) and the citations comments make
//! (`citations`: every cited section exists).
//!
//! `cargo test --test house`.

mod citations;
mod layering;
