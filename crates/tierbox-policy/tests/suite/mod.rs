mod egress;
mod redact;
mod validate_exec;
mod validate_scope;
