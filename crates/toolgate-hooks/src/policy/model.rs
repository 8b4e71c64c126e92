//! The Cedar model of toolgate's calls: the schema made from the registered tools, and
//! the entities and requests of one call.
//!
//! * principal: `User::"<id>"`, with `roles` (a set), `tenant` (optional) and every other
//!   attribute of the user (token claims such as `auth` and `scopes`) as a tag holding a
//!   set of strings;
//! * action: `Action::"<tool name>"`, in the group `Action::"call"` and in the group named
//!   for its prefix, if any (`Action::"prompt"` for `prompt.…`);
//! * resource: `Tool::"<tool name>"`, with `name`, `version`, `tags`, `source` (`local` or
//!   `mcp`), `upstream` (for imported tools) and `annotations`;
//! * context: `arguments` (typed from the tool's input schema), `time` and, when the host
//!   says, `transport`.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use cedar_policy::{
    Context, Entities, Entity, EntityId, EntityTypeName, EntityUid, Request, RestrictedExpression,
    Schema,
};
use serde_json::{Map, Value, json};
use toolgate_core::User;
use toolgate_core::tool::{ToolDefinition, ToolSource};

use super::arguments::ArgType;
use super::load::PolicyLoadError;

/// The action group every tool's action is in.
pub(crate) const CALL_GROUP: &str = "call";

/// What the model knows of one tool.
pub(crate) struct ToolModel {
    pub action: EntityUid,
    pub resource: Entity,
    pub arguments: ArgType,
}

/// The schema and the per-tool parts of requests.
pub(crate) struct Model {
    pub schema: Schema,
    pub schema_json: Value,
    pub tools: HashMap<String, ToolModel>,
}

fn uid(kind: &str, id: &str) -> EntityUid {
    // Every type name is fixed, a valid identifier.
    let kind: EntityTypeName = kind.parse().expect("a valid entity type name");
    EntityUid::from_type_name_and_id(kind, EntityId::new(id))
}

fn strings(values: &[String]) -> RestrictedExpression {
    RestrictedExpression::new_set(values.iter().cloned().map(RestrictedExpression::new_string))
}

impl Model {
    /// The model of `tools`, with the action groups of `groups` (group name, the tag of
    /// its tools).
    pub(crate) fn new<'t>(
        tools: impl IntoIterator<Item = &'t ToolDefinition>,
        groups: &[(String, String)],
    ) -> Result<Model, PolicyLoadError> {
        let string = json!({"type": "String"});
        let strings_type = json!({"type": "Set", "element": {"type": "String"}});
        let mut actions = Map::new();
        actions.insert(CALL_GROUP.to_owned(), json!({}));
        for (group, _) in groups {
            actions.insert(group.clone(), json!({"memberOf": [{"id": CALL_GROUP}]}));
        }
        let mut models = HashMap::new();
        for tool in tools {
            if actions.contains_key(&tool.name) {
                let rename = match &tool.source {
                    ToolSource::Mcp { server } => format!(
                        "give MCP server `{server}` a prefix, so that its tools get other names"
                    ),
                    _ => "rename the tool or the group".to_owned(),
                };
                return Err(PolicyLoadError::one(
                    "the tools",
                    format!(
                        "tool `{}` has the name of an action group, which policies name as `Action::\"{}\"`: {rename}",
                        tool.name, tool.name
                    ),
                ));
            }
            let arguments = ArgType::of_input(&tool.input_schema);
            let mut member_of = vec![json!({"id": CALL_GROUP})];
            member_of.extend(
                groups
                    .iter()
                    .filter(|(_, tag)| tool.tags.contains(tag))
                    .map(|(group, _)| json!({"id": group})),
            );
            actions.insert(
                tool.name.clone(),
                json!({
                    "memberOf": member_of,
                    "appliesTo": {
                        "principalTypes": ["User"],
                        "resourceTypes": ["Tool"],
                        "context": {"type": "Record", "attributes": {
                            "arguments": arguments.to_schema(),
                            "time": {"type": "Record", "attributes": {
                                "unix_seconds": {"type": "Long"},
                                "utc_hour": {"type": "Long"},
                                "utc_weekday": {"type": "Long"},
                            }},
                            "transport": {"type": "String", "required": false},
                        }},
                    },
                }),
            );
            let (source, upstream) = match &tool.source {
                ToolSource::Mcp { server } => ("mcp", Some(server.clone())),
                _ => ("local", None),
            };
            let a = tool.annotations;
            let mut attrs = vec![
                (
                    "name".to_owned(),
                    RestrictedExpression::new_string(tool.name.clone()),
                ),
                (
                    "version".to_owned(),
                    RestrictedExpression::new_string(tool.version.clone()),
                ),
                ("tags".to_owned(), strings(&tool.tags)),
                (
                    "source".to_owned(),
                    RestrictedExpression::new_string(source.to_owned()),
                ),
                (
                    "annotations".to_owned(),
                    RestrictedExpression::new_record([
                        (
                            "read_only".to_owned(),
                            RestrictedExpression::new_bool(a.read_only),
                        ),
                        (
                            "idempotent".to_owned(),
                            RestrictedExpression::new_bool(a.idempotent),
                        ),
                        (
                            "destructive".to_owned(),
                            RestrictedExpression::new_bool(a.destructive),
                        ),
                        (
                            "open_world".to_owned(),
                            RestrictedExpression::new_bool(a.open_world),
                        ),
                    ])
                    .expect("distinct keys"),
                ),
            ];
            if let Some(upstream) = upstream {
                attrs.push((
                    "upstream".to_owned(),
                    RestrictedExpression::new_string(upstream),
                ));
            }
            let resource = Entity::new(
                uid("Tool", &tool.name),
                attrs.into_iter().collect(),
                Default::default(),
            )
            .map_err(|e| PolicyLoadError::one("the tools", format!("tool `{}`: {e}", tool.name)))?;
            models.insert(
                tool.name.clone(),
                ToolModel {
                    action: uid("Action", &tool.name),
                    resource,
                    arguments,
                },
            );
        }
        let boolean = json!({"type": "Boolean"});
        let schema_json = json!({"": {
            "entityTypes": {
                "Tenant": {},
                "User": {
                    "memberOfTypes": ["Tenant"],
                    "shape": {"type": "Record", "attributes": {
                        "roles": strings_type,
                        "tenant": {"type": "String", "required": false},
                    }},
                    "tags": strings_type,
                },
                "Tool": {
                    "shape": {"type": "Record", "attributes": {
                        "name": string,
                        "version": string,
                        "tags": strings_type,
                        "source": string,
                        "upstream": {"type": "String", "required": false},
                        "annotations": {"type": "Record", "attributes": {
                            "read_only": boolean,
                            "idempotent": boolean,
                            "destructive": boolean,
                            "open_world": boolean,
                        }},
                    }},
                },
            },
            "actions": actions,
        }});
        let schema = Schema::from_json_value(schema_json.clone()).map_err(|e| {
            PolicyLoadError::one(
                "the tools",
                format!("their input schemas make no Cedar schema: {e}"),
            )
        })?;
        Ok(Model {
            schema,
            schema_json,
            tools: models,
        })
    }

    /// The entity of `user`: roles, tenant, and each attribute as a tag of strings; a member
    /// of its tenant's `Tenant` entity (`principal in Tenant::"acme"`).
    pub(crate) fn principal(user: &User) -> Result<Entity, String> {
        let attrs = [("roles".to_owned(), strings(&user.roles))]
            .into_iter()
            .chain(
                user.tenant
                    .clone()
                    .map(|t| ("tenant".to_owned(), RestrictedExpression::new_string(t))),
            );
        let tags = user.attributes.iter().filter_map(|(key, value)| {
            let values: Vec<String> = match value {
                Value::String(s) => vec![s.clone()],
                Value::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .collect(),
                Value::Bool(_) | Value::Number(_) => vec![value.to_string()],
                Value::Null | Value::Object(_) => return None,
            };
            Some((key.clone(), strings(&values)))
        });
        let tenant = user.tenant.iter().map(|t| uid("Tenant", t));
        Entity::new_with_tags(uid("User", &user.id), attrs, tenant, tags).map_err(|e| e.to_string())
    }

    /// The entities of a call: the user and the tool (the schema adds the actions).
    pub(crate) fn entities(&self, user: Entity, tool: &ToolModel) -> Result<Entities, String> {
        Entities::from_entities([user, tool.resource.clone()], Some(&self.schema))
            .map_err(|e| e.to_string())
    }

    /// The context of a call: `arguments` (as given; an unknown for partial evaluation),
    /// the time and the transport.
    pub(crate) fn context(
        arguments: RestrictedExpression,
        transport: Option<RestrictedExpression>,
    ) -> Result<Context, String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        let time = RestrictedExpression::new_record([
            (
                "unix_seconds".to_owned(),
                RestrictedExpression::new_long(now),
            ),
            (
                "utc_hour".to_owned(),
                RestrictedExpression::new_long(now / 3600 % 24),
            ),
            // 1970-01-01 was a Thursday; 0 is Monday.
            (
                "utc_weekday".to_owned(),
                RestrictedExpression::new_long((now / 86_400 + 3) % 7),
            ),
        ])
        .expect("distinct keys");
        let mut pairs = vec![
            ("arguments".to_owned(), arguments),
            ("time".to_owned(), time),
        ];
        if let Some(transport) = transport {
            pairs.push(("transport".to_owned(), transport));
        }
        Context::from_pairs(pairs).map_err(|e| e.to_string())
    }

    /// A complete request, checked against the schema.
    pub(crate) fn request(
        &self,
        principal: EntityUid,
        tool: &ToolModel,
        context: Context,
    ) -> Result<Request, String> {
        Request::new(
            principal,
            tool.action.clone(),
            tool.resource.uid(),
            context,
            Some(&self.schema),
        )
        .map_err(|e| e.to_string())
    }

    /// The request of a call of `tool` by anyone, with anything in its context (caller,
    /// arguments, time and transport all unknown), and the entities it needs: what could
    /// apply to the tool at all.
    pub(crate) fn any_call(&self, tool: &ToolModel) -> Result<(Request, Entities), String> {
        let context = Context::from_pairs([
            (
                "arguments".to_owned(),
                RestrictedExpression::new_unknown("arguments"),
            ),
            ("time".to_owned(), RestrictedExpression::new_unknown("time")),
            (
                "transport".to_owned(),
                RestrictedExpression::new_unknown("transport"),
            ),
        ])
        .map_err(|e| e.to_string())?;
        // The principal is left out of the request: unknown.
        let request = Request::builder()
            .action(tool.action.clone())
            .resource(tool.resource.uid())
            .context(context)
            .build();
        let entities = Entities::from_entities([tool.resource.clone()], Some(&self.schema))
            .map_err(|e| e.to_string())?;
        Ok((request, entities))
    }

    /// A request whose arguments are not known yet.
    pub(crate) fn partial_request(
        principal: EntityUid,
        tool: &ToolModel,
        context: Context,
    ) -> Request {
        Request::builder()
            .principal(principal)
            .action(tool.action.clone())
            .resource(tool.resource.uid())
            .context(context)
            .build()
    }
}
