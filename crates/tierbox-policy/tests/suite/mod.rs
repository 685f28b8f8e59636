mod arg_path_fixes;
mod egress;
mod rejections;
mod validate_exec;
mod validate_routes;
mod validate_scope;
