//! `/mcp/<name>`: the front as a virtual server ([`crate::virtual_server`]).
//!
//! The outermost layer of the front's MCP service: a request at
//! `/mcp/<name>` of a virtual server the configuration in force defines,
//! from a caller it admits, goes on to the front with the virtual server on
//! its [`Caller`]; everything after that (sessions, the fast path, the full
//! way) is the front's, and what the caller may see is decided where every
//! other request's is (`crate::route::access`). An unknown name is 404, a
//! caller it does not admit 403. A request at `/mcp` itself passes as it
//! came.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{Request, Response};
use axum::response::IntoResponse;

use crate::api::error::ApiError;
use crate::auth::Caller;
use crate::live::LiveConfig;

/// The front's MCP service `S`, serving virtual servers at `/<name>` under
/// its mount point.
#[derive(Clone)]
pub struct VirtualServers<S> {
    inner: S,
    live: LiveConfig,
}

impl<S> VirtualServers<S> {
    /// `inner`, with the virtual servers of the configuration in force
    /// (read at each request: a reload applies to the next one).
    pub(super) fn new(inner: S, live: LiveConfig) -> Self {
        Self { inner, live }
    }
}

/// The virtual server a path under the mount point names: `None` for the
/// mount point itself, `Some(Err)` for a path no virtual server could have.
fn named(path: &str) -> Option<Result<&str, ()>> {
    let name = path.trim_start_matches('/');
    let name = name.strip_suffix('/').unwrap_or(name);
    match name {
        "" => None,
        name if name.contains('/') => Some(Err(())),
        name => Some(Ok(name)),
    }
}

impl<S> tower::Service<Request<Body>> for VirtualServers<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        // The clone that was made ready is the one that serves.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let name = match named(request.uri().path()) {
            None => return Box::pin(inner.call(request)),
            Some(Ok(name)) => name.to_string(),
            Some(Err(())) => {
                return Box::pin(async { Ok(ApiError::not_found("route").into_response()) });
            }
        };
        let Some(through) = self.live.get().virtual_server(&name).map(|v| v.through()) else {
            return Box::pin(async move {
                Ok(ApiError::not_found(&format!("virtual server {name:?}")).into_response())
            });
        };
        // The HTTP layer authenticated the request; without its caller (a
        // misassembled router) nobody is admitted.
        let Some(caller) = request.extensions_mut().get_mut::<Caller>() else {
            return Box::pin(async { Ok(ApiError::unauthorized().into_response()) });
        };
        if !through.admits(caller.principal.as_deref()) {
            let refusal = ApiError::forbidden(format!(
                "this token's principal may not use the virtual server {name:?}"
            ));
            return Box::pin(async { Ok(refusal.into_response()) });
        }
        caller.through = Some(through);
        Box::pin(inner.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::named;

    #[test]
    fn a_path_names_one_virtual_server_or_none() {
        assert_eq!(named("/"), None);
        assert_eq!(named(""), None);
        assert_eq!(named("/ops"), Some(Ok("ops")));
        assert_eq!(named("/ops/"), Some(Ok("ops")));
        assert_eq!(named("/ops/more"), Some(Err(())));
    }
}
