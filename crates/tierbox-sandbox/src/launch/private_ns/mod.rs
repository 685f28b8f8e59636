//! A run's private mount namespace as the child's setup carries it out: the raw
//! description ([`PrivateNs`]: the trees cloned and moved, then the protected paths bound
//! or covered, each object checked to be the one planned, [`FileId`]) and the raw system
//! calls that make it. Tier B plans one (`tier_b::namespace`) and hands it to the cloned
//! child (`launch::prefix`) or to a warm slot's launcher thread.

#[allow(unsafe_code)]
mod sys;

pub(crate) use sys::{
    FileId, NsProtect, NsTree, PrivateNs, join_userns, private_ns, private_ns_mounts,
};
