//! Upstream prompts and resources, passed through the front.
//!
//! Prompts are named as tools are (`<prefix>__<name>`, an empty prefix keeps
//! the name). Resources keep their URIs, which clients understand (`file://`,
//! a server's own scheme); only their names take the prefix. A read goes to
//! the server that listed the URI, else to the server with the longest
//! matching literal start of a URI template, else to the only server that
//! offers resources. Each list asks every server at that moment (in
//! parallel, bounded by the call timeout): work proportional to the number
//! of servers, never to the number of tasks. A server that offers none, or
//! cannot be reached, is left out of the list and logged.
//!
//! Every request is the caller's [`Access`] (policy and fair limits, decided
//! in `crate::route`): an item the caller may not see is left out of its
//! lists and resolved as if no server offered it, so a `prompts/get`, a
//! `resources/read` or a completion of it is refused exactly as one of a
//! name that does not exist. What was last listed is kept for every caller
//! (each name with every server that offers it); each caller's view of it
//! is filtered at each request.

use crate::failure::Failure;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use futures::future::join_all;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse, Prompt,
    ReadResourceRequestParams, ReadResourceResponse, Reference, Resource, ResourceTemplate,
};
use rmcp::service::ServiceError;
use rmcp::{ErrorData, Peer, RoleClient};

use crate::auth::Caller;
use crate::calls::Calls;
use crate::route::{Access, Item};
use crate::upstreams::catalog::front_name;
use crate::upstreams::{Upstream, Upstreams};

/// Where prompts and resources were last seen.
#[derive(Default)]
pub struct Directory {
    /// Front prompt name → each (server, upstream prompt name) listing it,
    /// in the servers' order.
    prompts: Mutex<HashMap<String, Vec<(String, String)>>>,
    /// Resource URI → the servers listing it, in their order.
    resources: Mutex<HashMap<String, Vec<String>>>,
    /// (literal start of a URI template, server), longest first.
    templates: Mutex<Vec<(String, String)>>,
    /// Servers that listed any resource or template.
    offering: Mutex<Vec<String>>,
}

fn error_of(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(data) => data,
        other => Failure::unreachable(&other).into(),
    }
}

/// Run `op` on a lane of `server`, waiting for the lane and the answer at
/// most the pool's call timeout.
pub(super) async fn on_lane<T, F, Fut>(
    upstreams: &Upstreams,
    server: &str,
    op: F,
) -> Result<T, ErrorData>
where
    F: FnOnce(Peer<RoleClient>) -> Fut,
    Fut: Future<Output = Result<T, ServiceError>>,
{
    let pool = upstreams
        .lanes(server)
        .map_err(|e| Failure::unreachable(&e))?;
    let call = async {
        let lane = pool.acquire().await.map_err(|e| Failure::unreachable(&e))?;
        op(lane.peer().clone()).await.map_err(error_of)
    };
    within_call_timeout(pool.options().call_timeout, server, call).await
}

/// Run `op` on `peer`, a session of `server` held elsewhere, waiting for
/// the answer at most the server's call timeout, as [`on_lane`] does.
pub(super) async fn on_peer<T, F, Fut>(
    upstreams: &Upstreams,
    server: &str,
    peer: Peer<RoleClient>,
    op: F,
) -> Result<T, ErrorData>
where
    F: FnOnce(Peer<RoleClient>) -> Fut,
    Fut: Future<Output = Result<T, ServiceError>>,
{
    let pool = upstreams
        .lanes(server)
        .map_err(|e| Failure::unreachable(&e))?;
    let call = async { op(peer).await.map_err(error_of) };
    within_call_timeout(pool.options().call_timeout, server, call).await
}

/// `call`'s answer, or an error once `limit` has passed.
async fn within_call_timeout<T>(
    limit: std::time::Duration,
    server: &str,
    call: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r,
        Err(_) => Err(ErrorData::internal_error(
            format!("{server:?} did not answer within {limit:?}"),
            None,
        )),
    }
}

/// `method_not_found` is how a server says it offers none: not worth a warning.
fn offers_none(e: &ErrorData) -> bool {
    e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND
}

/// Each server's answer to `list`, with the failures logged and left out.
async fn from_every_server<T, F, Fut>(
    upstreams: &Upstreams,
    what: &str,
    list: F,
) -> Vec<(Upstream, T)>
where
    F: Fn(Peer<RoleClient>) -> Fut,
    Fut: Future<Output = Result<T, ServiceError>>,
{
    let servers = upstreams.servers().to_vec();
    let answers = join_all(servers.iter().map(|s| on_lane(upstreams, &s.name, &list))).await;
    servers
        .into_iter()
        .zip(answers)
        .filter_map(|(server, answer)| match answer {
            Ok(items) => Some((server, items)),
            Err(e) if offers_none(&e) => None,
            Err(e) => {
                tracing::warn!(server = %server.name, error = %e.message, "cannot list the {what} of an upstream server");
                None
            }
        })
        .collect()
}

/// The literal start of a URI template (up to its first expression).
fn literal_start(template: &str) -> &str {
    template.split('{').next().unwrap_or(template)
}

/// A request's way in: its caller's [`Access`] (admitted under its fair
/// limits), or the refusal as the caller's error.
pub(super) async fn admit<'a>(calls: &Calls, caller: &'a Caller) -> Result<Access<'a>, ErrorData> {
    Access::admit(calls, caller)
        .await
        .map_err(|f| f.for_caller(caller).into())
}

/// The error of a prompt no server offers this caller.
fn unknown_prompt(name: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown prompt {name:?}"), None)
}

/// What no server offers this caller, as `resources/read` says it.
fn not_offered(uri: &str) -> String {
    format!("no upstream server offers {uri:?}")
}

impl Directory {
    /// Every server's prompts, named for the front, that `caller` may see.
    pub async fn list_prompts(
        &self,
        calls: &Calls,
        caller: &Caller,
    ) -> Result<Vec<Prompt>, ErrorData> {
        let access = admit(calls, caller).await?;
        Ok(self.prompts_seen(&calls.upstreams, &access).await)
    }

    /// List every server's prompts afresh (kept for every caller) and keep
    /// those `access` sees, the first server keeping a name two list.
    async fn prompts_seen(&self, upstreams: &Upstreams, access: &Access<'_>) -> Vec<Prompt> {
        let lists = from_every_server(upstreams, "prompts", |peer| async move {
            peer.list_all_prompts().await
        })
        .await;
        let mut names: HashMap<String, Vec<(String, String)>> = HashMap::new();
        let mut out = Vec::new();
        for (server, prompts) in lists {
            for mut prompt in prompts {
                let front = front_name(&server.prefix, &prompt.name);
                let listing = names.entry(front.clone()).or_default();
                let clash = listing.iter().any(|(s, n)| access.sees(Item::prompt(s, n)));
                listing.push((server.name.clone(), prompt.name.to_string()));
                if !access.sees(Item::prompt(&server.name, &prompt.name)) {
                    continue;
                }
                if clash {
                    tracing::warn!(prompt = %front, server = %server.name, "an upstream prompt name clashes; left out");
                    continue;
                }
                prompt.name = front;
                out.push(prompt);
            }
        }
        *self.prompts.lock().expect("directory lock") = names;
        out
    }

    /// The first (server, upstream name) of front prompt `name` that
    /// `access` sees, from what was last listed.
    fn prompt_of(&self, name: &str, access: &Access<'_>) -> Option<(String, String)> {
        self.prompts
            .lock()
            .expect("directory lock")
            .get(name)?
            .iter()
            .find(|(server, prompt)| access.sees(Item::prompt(server, prompt)))
            .cloned()
    }

    /// [`Directory::prompt_of`], listing again once if it is not known
    /// (perhaps new since); the same way for a name hidden from this
    /// caller as for one that does not exist.
    async fn find_prompt(
        &self,
        upstreams: &Upstreams,
        name: &str,
        access: &Access<'_>,
    ) -> Result<(String, String), ErrorData> {
        if let Some(found) = self.prompt_of(name, access) {
            return Ok(found);
        }
        self.prompts_seen(upstreams, access).await;
        self.prompt_of(name, access)
            .ok_or_else(|| unknown_prompt(name))
    }

    /// `prompts/get` of a front prompt name, answered by its server as is.
    pub async fn get_prompt(
        &self,
        calls: &Calls,
        caller: &Caller,
        mut request: GetPromptRequestParams,
    ) -> Result<GetPromptResponse, ErrorData> {
        let access = admit(calls, caller).await?;
        let upstreams = &calls.upstreams;
        let (server, name) = self.find_prompt(upstreams, &request.name, &access).await?;
        request.name = name;
        on_lane(upstreams, &server, |peer| async move {
            peer.get_prompt_once(request).await
        })
        .await
    }

    /// Every server's resources that `caller` may see, URIs unchanged,
    /// names prefixed.
    pub async fn list_resources(
        &self,
        calls: &Calls,
        caller: &Caller,
    ) -> Result<Vec<Resource>, ErrorData> {
        let access = admit(calls, caller).await?;
        Ok(self.resources_seen(&calls.upstreams, &access).await)
    }

    /// List every server's resources afresh (kept for every caller) and
    /// keep those `access` sees, the first server keeping a URI two list.
    async fn resources_seen(&self, upstreams: &Upstreams, access: &Access<'_>) -> Vec<Resource> {
        let lists = from_every_server(upstreams, "resources", |peer| async move {
            peer.list_all_resources().await
        })
        .await;
        let mut by_uri: HashMap<String, Vec<String>> = HashMap::new();
        let mut out = Vec::new();
        for (server, resources) in lists {
            self.offers(&server.name);
            for mut resource in resources {
                let listing = by_uri.entry(resource.uri.clone()).or_default();
                let clash = listing
                    .iter()
                    .any(|s| access.sees(Item::resource(s, &resource.uri)));
                listing.push(server.name.clone());
                if !access.sees(Item::resource(&server.name, &resource.uri)) {
                    continue;
                }
                if clash {
                    tracing::warn!(uri = %resource.uri, server = %server.name, "two upstream servers list one resource URI; the first keeps it");
                    continue;
                }
                resource.name = front_name(&server.prefix, &resource.name);
                out.push(resource);
            }
        }
        *self.resources.lock().expect("directory lock") = by_uri;
        out
    }

    /// Every server's resource templates that `caller` may see, names
    /// prefixed.
    pub async fn list_templates(
        &self,
        calls: &Calls,
        caller: &Caller,
    ) -> Result<Vec<ResourceTemplate>, ErrorData> {
        let access = admit(calls, caller).await?;
        Ok(self.templates_seen(&calls.upstreams, &access).await)
    }

    /// List every server's templates afresh (kept for every caller) and
    /// keep those `access` sees.
    async fn templates_seen(
        &self,
        upstreams: &Upstreams,
        access: &Access<'_>,
    ) -> Vec<ResourceTemplate> {
        let lists = from_every_server(upstreams, "resource templates", |peer| async move {
            peer.list_all_resource_templates().await
        })
        .await;
        let mut starts = Vec::new();
        let mut out = Vec::new();
        for (server, templates) in lists {
            self.offers(&server.name);
            for mut template in templates {
                starts.push((
                    literal_start(&template.uri_template).to_string(),
                    server.name.clone(),
                ));
                if !access.sees(Item::resource(&server.name, &template.uri_template)) {
                    continue;
                }
                template.name = front_name(&server.prefix, &template.name);
                out.push(template);
            }
        }
        starts.sort_by_key(|(start, _)| std::cmp::Reverse(start.len()));
        *self.templates.lock().expect("directory lock") = starts;
        out
    }

    fn offers(&self, server: &str) {
        let mut offering = self.offering.lock().expect("directory lock");
        if !offering.iter().any(|s| s == server) {
            offering.push(server.to_string());
        }
    }

    /// The server `uri` belongs to among those `may` lets it be read from,
    /// from what was last listed: the first that listed it, else the one
    /// with the longest matching template start, else the only one that
    /// offers resources.
    fn server_of(&self, uri: &str, may: impl Fn(&str) -> bool) -> Option<String> {
        if let Some(servers) = self.resources.lock().expect("directory lock").get(uri)
            && let Some(server) = servers.iter().find(|s| may(s))
        {
            return Some(server.clone());
        }
        let templates = self.templates.lock().expect("directory lock");
        if let Some((_, server)) = templates.iter().find(|(start, server)| {
            !start.is_empty() && uri.starts_with(start.as_str()) && may(server)
        }) {
            return Some(server.clone());
        }
        let offering = self.offering.lock().expect("directory lock");
        let mut open = offering.iter().filter(|s| may(s));
        match (open.next(), open.next()) {
            (Some(only), None) => Some(only.clone()),
            _ => None,
        }
    }

    /// The server `uri` (a resource's URI or a template's) belongs to for
    /// `access`, listing again once if none is known (perhaps new since);
    /// the same way for a URI hidden from this caller as for one no server
    /// offers.
    async fn find_resource(
        &self,
        upstreams: &Upstreams,
        uri: &str,
        access: &Access<'_>,
    ) -> Option<String> {
        let may = |server: &str| access.sees(Item::resource(server, uri));
        if let Some(server) = self.server_of(uri, may) {
            return Some(server);
        }
        self.resources_seen(upstreams, access).await;
        self.templates_seen(upstreams, access).await;
        self.server_of(uri, may)
    }

    /// `completion/complete`, answered as is by the server of the prompt (its
    /// front name mapped back) or of the resource template referred to.
    pub async fn complete(
        &self,
        calls: &Calls,
        caller: &Caller,
        mut request: CompleteRequestParams,
    ) -> Result<CompleteResult, ErrorData> {
        let access = admit(calls, caller).await?;
        let upstreams = &calls.upstreams;
        let server = match &mut request.r#ref {
            Reference::Prompt(prompt) => {
                let (server, name) = self.find_prompt(upstreams, &prompt.name, &access).await?;
                prompt.name = name;
                server
            }
            Reference::Resource(resource) => {
                let uri = resource.uri.clone();
                self.find_resource(upstreams, &uri, &access)
                    .await
                    .ok_or_else(|| ErrorData::invalid_params(not_offered(&uri), None))?
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "completion/complete: an unknown kind of reference",
                    None,
                ));
            }
        };
        on_lane(upstreams, &server, |peer| async move {
            peer.complete(request).await
        })
        .await
    }

    /// The server resource `uri` belongs to for `access` (the one rule of
    /// `resources/read`, `resources/subscribe` and `…/unsubscribe`), or the
    /// error a read of it gets.
    pub(super) async fn resource_owner(
        &self,
        upstreams: &Upstreams,
        uri: &str,
        access: &Access<'_>,
    ) -> Result<String, ErrorData> {
        self.find_resource(upstreams, uri, access)
            .await
            .ok_or_else(|| ErrorData::resource_not_found(not_offered(uri), None))
    }

    /// `resources/read`, answered by the server the URI belongs to as is.
    pub async fn read_resource(
        &self,
        calls: &Calls,
        caller: &Caller,
        request: ReadResourceRequestParams,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let access = admit(calls, caller).await?;
        let upstreams = &calls.upstreams;
        let server = self
            .resource_owner(upstreams, &request.uri, &access)
            .await?;
        on_lane(upstreams, &server, |peer| async move {
            peer.read_resource_once(request).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_is_matched_by_its_literal_start() {
        assert_eq!(
            literal_start("demo://resource/dynamic/text/{id}"),
            "demo://resource/dynamic/text/"
        );
        assert_eq!(literal_start("file:///{path}"), "file:///");
        assert_eq!(literal_start("plain://x"), "plain://x");
        let d = Directory::default();
        *d.templates.lock().unwrap() = vec![
            ("demo://resource/dynamic/text/".into(), "a".into()),
            ("demo://".into(), "b".into()),
        ];
        d.resources
            .lock()
            .unwrap()
            .insert("demo://listed".into(), vec!["c".into()]);
        let any = |_: &str| true;
        assert_eq!(
            d.server_of("demo://resource/dynamic/text/7", any)
                .as_deref(),
            Some("a")
        );
        assert_eq!(d.server_of("demo://other", any).as_deref(), Some("b"));
        assert_eq!(d.server_of("demo://listed", any).as_deref(), Some("c"));
        assert_eq!(
            d.server_of("file:///x", any),
            None,
            "no server is known to offer it"
        );
        *d.offering.lock().unwrap() = vec!["only".into()];
        *d.templates.lock().unwrap() = Vec::new();
        assert_eq!(d.server_of("file:///x", any).as_deref(), Some("only"));
    }

    #[test]
    fn a_uri_belongs_only_to_a_server_the_caller_may_read_it_from() {
        let d = Directory::default();
        d.resources
            .lock()
            .unwrap()
            .insert("test://a".into(), vec!["priv".into(), "pub".into()]);
        *d.templates.lock().unwrap() = vec![("test://template/".into(), "priv".into())];
        *d.offering.lock().unwrap() = vec!["priv".into(), "pub".into()];
        let not_priv = |s: &str| s != "priv";
        let nothing = |_: &str| false;
        // Listed by both: the first the caller may read it from.
        assert_eq!(d.server_of("test://a", not_priv).as_deref(), Some("pub"));
        // priv's template is not this caller's: pub is the only server
        // left offering resources.
        assert_eq!(
            d.server_of("test://template/1/data", not_priv).as_deref(),
            Some("pub")
        );
        assert_eq!(d.server_of("test://a", nothing), None);
        assert_eq!(d.server_of("test://template/1/data", nothing), None);
        // Two servers offer resources: an unknown URI has no owner.
        assert_eq!(d.server_of("test://b", |_: &str| true), None);
    }
}
