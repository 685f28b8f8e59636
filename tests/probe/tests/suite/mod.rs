mod harness;
mod tier_b;
mod tier_b_lifecycle;
mod tier_c;
