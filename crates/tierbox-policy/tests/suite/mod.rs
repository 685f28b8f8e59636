mod egress;
mod rejections;
mod validate_exec;
mod validate_routes;
mod validate_scope;
