//! Shape and hard caps: checked before anything else, on the raw request.

use crate::rejection::Rejection;
use crate::request::*;

pub(crate) fn check(req: &ProcessRunRequest) -> Result<(), Rejection> {
    let cmd = &req.command;
    if cmd.is_empty() {
        return Err(Rejection::CommandEmpty);
    }
    if cmd.len() > MAX_COMMAND_BYTES {
        return Err(Rejection::CommandTooLong {
            bytes: cmd.len(),
            max: MAX_COMMAND_BYTES,
        });
    }
    nul_free("command", cmd)?;
    if cmd.chars().any(char::is_whitespace) {
        return Err(Rejection::CommandNotBare {
            command: cmd.clone(),
        });
    }
    if req.args.len() > MAX_ARGS {
        return Err(Rejection::TooManyArgs {
            count: req.args.len(),
            max: MAX_ARGS,
        });
    }
    for (index, arg) in req.args.iter().enumerate() {
        if arg.len() > MAX_ARG_BYTES {
            return Err(Rejection::ArgTooLong {
                index,
                bytes: arg.len(),
                max: MAX_ARG_BYTES,
            });
        }
        nul_free(&format!("args[{index}]"), arg)?;
    }
    if let Some(sub) = &req.workspace {
        nul_free("workspace", sub)?;
    }
    if let Some(cwd) = &req.cwd {
        if cwd.len() > MAX_CWD_BYTES {
            return Err(Rejection::CwdTooLong {
                bytes: cwd.len(),
                max: MAX_CWD_BYTES,
            });
        }
        nul_free("cwd", cwd)?;
    }
    if req.env.len() > MAX_ENV_ENTRIES {
        return Err(Rejection::TooManyEnv {
            count: req.env.len(),
            max: MAX_ENV_ENTRIES,
        });
    }
    for (name, value) in &req.env {
        let invalid = |reason: &str| Rejection::EnvNameInvalid {
            name: name.clone(),
            reason: reason.to_owned(),
        };
        if name.is_empty() {
            return Err(invalid("empty"));
        }
        if name.len() > MAX_ENV_NAME_BYTES {
            return Err(invalid(&format!("longer than {MAX_ENV_NAME_BYTES} bytes")));
        }
        if name.contains('=') {
            return Err(invalid("contains '='"));
        }
        if !is_portable_env_name(name) {
            return Err(invalid(
                "not a portable variable name: a letter or '_' first, then only letters, digits and '_'",
            ));
        }
        nul_free(&format!("env name {name:?}"), name)?;
        if value.len() > MAX_ENV_VALUE_BYTES {
            return Err(Rejection::EnvValueTooLong {
                name: name.clone(),
                bytes: value.len(),
                max: MAX_ENV_VALUE_BYTES,
            });
        }
        nul_free(&format!("env {name}"), value)?;
    }
    if req.timeout_ms == Some(0) {
        return Err(Rejection::TimeoutZero);
    }
    if req.requested_egress_hosts.len() > MAX_EGRESS_HOSTS {
        return Err(Rejection::TooManyEgressHosts {
            count: req.requested_egress_hosts.len(),
            max: MAX_EGRESS_HOSTS,
        });
    }
    for (i, host) in req.requested_egress_hosts.iter().enumerate() {
        nul_free(&format!("requested_egress_hosts[{i}]"), host)?;
        if host.len() > MAX_HOST_BYTES {
            return Err(Rejection::EgressHostInvalid {
                host: host.clone(),
                reason: format!("longer than {MAX_HOST_BYTES} bytes"),
            });
        }
    }
    if let (Some(lifetime), false) = (req.lifetime, req.background) {
        let name = match lifetime {
            Lifetime::RunOwned => "run_owned",
            Lifetime::Detached => "detached",
        };
        return Err(Rejection::LifetimeWithoutBackground {
            lifetime: name.to_owned(),
        });
    }
    Ok(())
}

fn nul_free(field: &str, value: &str) -> Result<(), Rejection> {
    if value.contains('\0') {
        return Err(Rejection::NulByte {
            field: field.to_owned(),
        });
    }
    Ok(())
}

/// Whether `name` is a variable name every shell can export (POSIX's portable set:
/// `[A-Za-z_][A-Za-z0-9_]*`). Others — a blank, a leading digit, punctuation — cannot be
/// set or read by the program's own shell, so they are a mistake at best.
pub(crate) fn is_portable_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
