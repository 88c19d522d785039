//! What the deployment files ship, run for real: the container image
//! ([`image`]: `deploy/Containerfile` built by `deploy/build-image` from the
//! binary this test build made) under podman ([`podman`]: the command with the
//! flags the host needs, and the guard that removes what a test made).
//!
//! Needs podman (`apt-get install podman buildah runc`). Without it the test
//! skips loudly, except under `CI=true`, where it fails.

mod image;
mod podman;
