mod devices;
mod grants;
mod harness;
mod sys;
mod tier_b;
mod tier_b_lifecycle;
mod tier_c;
