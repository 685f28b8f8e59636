//! (tests being written)
