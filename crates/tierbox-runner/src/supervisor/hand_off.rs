//! A run's seccomp hand-off, served by the supervisor for the run's life: the `chmod`
//! family performed beneath the run's writable roots, and the argument rules' refusals
//! answered and recorded.

use tierbox_policy::plan::Plan;
use tierbox_sandbox::contract::RunningSandbox;
use tierbox_sandbox::contract::{RefusalLog, SeccompMediator};

use super::AbortOnDrop;

/// Serves the run's seccomp hand-off, when it has one, for as long as the returned task
/// lives: chmod beneath the workspace, the declared writable paths and the run's private
/// temporary directory; the handed-off refusals answered and recorded in the returned
/// log (`None` when the filter hands none off).
pub(crate) fn serve_hand_off(
    plan: &Plan,
    l: &mut RunningSandbox,
) -> std::io::Result<(Option<AbortOnDrop>, Option<RefusalLog>)> {
    let Some(hand_off) = l.take_seccomp_hand_off() else {
        return Ok((None, None));
    };
    let refusals = hand_off.refusals.is_some().then(RefusalLog::default);
    let m = seccomp_mediator(hand_off, plan, l, refusals.as_ref())?;
    Ok((Some(AbortOnDrop(tokio::spawn(m.serve()))), refusals))
}

fn seccomp_mediator(
    mut hand_off: tierbox_sandbox::contract::SeccompHandOff,
    plan: &Plan,
    l: &RunningSandbox,
    refusals: Option<&RefusalLog>,
) -> std::io::Result<SeccompMediator> {
    let views = std::mem::take(&mut hand_off.views);
    // Which root could not be opened, in the error (the run is refused on it).
    let named = |path: &std::path::Path| {
        let path = path.display().to_string();
        move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{path}: {e}"))
    };
    let mut m = SeccompMediator::new(hand_off.listener, &plan.workspace, l.child_ids().0)
        .map_err(named(&plan.workspace))?;
    if hand_off.mediate_chmod {
        m = m.mediating_chmod();
    }
    if let (Some(enforcing), Some(log)) = (hand_off.refusals, refusals) {
        m = m.refusing(enforcing, log.clone());
    }
    if hand_off.pending {
        m = m.pending();
    }
    for root in &plan.filesystem.writable {
        // A grant the run's private /tmp or /dev/shm serves is one of `views`.
        if views.iter().any(|(view, _)| view == root) {
            continue;
        }
        // A declared grant that is gone refuses the start (the plan no longer holds);
        // an entry of a grant carved around a denied path inside it, which another
        // process removed since the plan was made, is skipped: nothing beneath it can be
        // changed.
        m = match plan.filesystem.writable_roots.contains(root) {
            true => m.also_beneath(root),
            false => m.also_beneath_if_present(root),
        }
        .map_err(named(root))?;
    }
    match l.slot() {
        Some(_) if !views.is_empty() => {
            for (view, host) in &views {
                m = m.also_beneath_as(view, host).map_err(named(host))?;
            }
        }
        Some(slot) => m = m.also_beneath(&slot.tmp).map_err(named(&slot.tmp))?,
        None => {}
    }
    Ok(m)
}
