//! Limits: the request's timeout against the policy, and the resolved per-run limits.

use crate::plan::{BackgroundPlan, LimitsPlan};
use crate::policy::Policy;
use crate::rejection::Rejection;
use crate::request::ProcessRunRequest;

pub(crate) fn resolve(
    policy: &Policy,
    req: &ProcessRunRequest,
) -> Result<(LimitsPlan, Option<BackgroundPlan>), Rejection> {
    let l = &policy.limits;
    let bg = &policy.background;
    let background = if req.background {
        let lifetime_ms = req.timeout_ms.unwrap_or(bg.default_lifetime_ms);
        if lifetime_ms > bg.max_lifetime_ms {
            return Err(Rejection::LimitAbovePolicy {
                field: "timeout_ms (background lifetime)".to_owned(),
                requested: lifetime_ms,
                max: bg.max_lifetime_ms,
            });
        }
        Some(BackgroundPlan {
            lifetime: req.lifetime.unwrap_or_default(),
            lifetime_ms,
            spill_bytes: bg.spill_bytes,
        })
    } else {
        None
    };
    let wall_timeout_ms = match (&background, req.timeout_ms) {
        (Some(b), _) => b.lifetime_ms,
        (None, Some(t)) if t > l.max_timeout_ms => {
            return Err(Rejection::LimitAbovePolicy {
                field: "timeout_ms".to_owned(),
                requested: t,
                max: l.max_timeout_ms,
            });
        }
        (None, Some(t)) => t,
        (None, None) => l.timeout_ms,
    };
    let cpu_ms = l.cpu_time_ms.unwrap_or(wall_timeout_ms);
    Ok((
        LimitsPlan {
            wall_timeout_ms,
            cpu_time_secs: cpu_ms.div_ceil(1000).max(1),
            memory_bytes: l.memory_bytes,
            max_processes: l.max_processes,
            open_files: l.open_files,
            file_size_bytes: l.file_size_bytes,
            cpus: l.cpus,
            disk_bytes: l.disk_bytes,
            stdin_bytes: l.stdin_bytes,
        },
        background,
    ))
}
