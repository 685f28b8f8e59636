mod devices;
mod grants;
mod harness;
mod leave;
mod sys;
mod tier_b;
mod tier_b_lifecycle;
mod tier_c;
