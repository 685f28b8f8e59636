//! The supervisor process itself: its identity, process-wide switches, and the raw
//! process calls a supervisor needs for children that are not a run's root (orphans
//! re-parented to it as their subreaper).
//!
//! ```
//! let (uid, _gid) = tierbox_sandbox::process::current_ids();
//! assert_eq!(uid == 0, tierbox_sandbox::process::current_ids().0 == 0);
//! ```

pub use crate::launch::exit::{exited_child_waiting, kill, pidfd_has_exited, reap_nohang};
pub use crate::launch::slots::{drain as drain_slots, pooling, set_pooling};
pub use crate::launch::sys::{
    block_sigpipe_on_this_thread, current_ids, default_sigpipe, set_child_subreaper,
    set_not_dumpable,
};
pub use crate::linux::ns::netns_pool::set_enabled as set_network_namespace_pool;
