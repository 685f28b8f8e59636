/// Runs `$body(test_name, backend)` as three tests, one per backend that keeps
/// protected paths read-only: Tier B and both Tier C backends.
macro_rules! on_every_backend {
    ($body:ident => $tier_b:ident, $native:ident, $bwrap:ident) => {
        #[tokio::test]
        async fn $tier_b() {
            $body(stringify!($tier_b), Backend::TierB).await;
        }

        #[tokio::test]
        async fn $native() {
            $body(stringify!($native), Backend::Native).await;
        }

        #[tokio::test]
        async fn $bwrap() {
            $body(stringify!($bwrap), Backend::Bwrap).await;
        }
    };
}

mod devices;
mod grants;
mod harness;
mod leave;
mod nested_repos;
mod private_tmp;
mod protected;
mod sys;
mod tier_b;
mod tier_b_lifecycle;
mod tier_c;
