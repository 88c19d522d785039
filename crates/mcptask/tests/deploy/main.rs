//! What the deployment files ship, run for real: the minimal container image
//! ([`image`]: `deploy/Containerfile` built by `deploy/build-image` from the
//! binary this test build made), the stdio image ([`stdio_image`]:
//! `deploy/Containerfile.stdio`, run by scripts/test-image-stdio, not by
//! scripts/test), both under podman ([`podman`]: the command with the flags
//! the host needs, and the guard that removes what a test made) and probed from
//! the host ([`probe`]).
//!
//! Needs podman (`apt-get install podman buildah runc`; the stdio image also
//! mmdebstrap). Without it the tests skip loudly, except under `CI=true`,
//! where they fail.

mod image;
mod podman;
mod probe;
mod stdio_image;
