//! Who is asking: tasks can be bound to the authenticated subject that created them.

use rmcp::RoleServer;
use rmcp::service::RequestContext;

/// The authenticated subject of a request. An authentication layer in front of
/// the Streamable HTTP service inserts it into the HTTP request's extensions;
/// the runtime reads it from there.
///
/// ```
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(mcptask_server::Principal("alice".into()));
/// assert_eq!(req.extensions().get::<mcptask_server::Principal>().unwrap().0, "alice");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub String);

/// The principal of a request, if an authentication layer recorded one.
pub fn of_request(context: &RequestContext<RoleServer>) -> Option<String> {
    if let Some(p) = context.extensions.get::<Principal>() {
        return Some(p.0.clone());
    }
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .map(|p| p.0.clone())
}
