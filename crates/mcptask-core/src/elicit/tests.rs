use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn form_request(schema: Value) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "?", "requestedSchema": schema}})
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

fn refused(schema: Value, content: Value) -> AnswerError {
    check_answer(&form_request(schema), &accept(content)).expect_err("must be refused")
}

fn confirm() -> Value {
    json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]})
}

#[test]
fn a_string_for_a_boolean_names_the_field_and_how_to_write_it() {
    let e = refused(confirm(), json!({"confirm": "yes"}));
    assert_eq!(e.field.as_deref(), Some("confirm"));
    assert_eq!(
        e.to_string(),
        "field \"confirm\": expected a boolean, got the string \"yes\" (write true or false, without quotes)"
    );
    assert!(check_answer(&form_request(confirm()), &accept(json!({"confirm": false}))).is_ok());
}

#[test]
fn missing_required_and_unknown_fields_are_refused_by_name() {
    let e = refused(confirm(), json!({}));
    assert_eq!(e.field.as_deref(), Some("confirm"));
    assert!(e.reason.contains("required"), "{e}");
    // No content at all is the same as an empty one.
    let e = check_answer(&form_request(confirm()), &json!({"action": "accept"})).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("confirm"));

    let e = refused(
        confirm(),
        json!({"confirm": true, "confirn": true, "zz": 1}),
    );
    assert_eq!(e.field.as_deref(), Some("confirn"));
    assert!(e.reason.contains("\"zz\""), "{e}");
    assert!(e.reason.contains("asks for \"confirm\""), "{e}");

    // An optional field may be left out.
    let optional = json!({"type": "object", "properties": {"note": {"type": "string"}}});
    assert!(check_answer(&form_request(optional), &accept(json!({}))).is_ok());
    // Extra properties are fine when the schema says so.
    let open = json!({"type": "object", "properties": {}, "additionalProperties": true});
    assert!(check_answer(&form_request(open), &accept(json!({"x": 1}))).is_ok());
}

#[test]
fn decline_cancel_and_url_mode_carry_no_content_and_pass() {
    for action in ["decline", "cancel"] {
        assert!(check_answer(&form_request(confirm()), &json!({"action": action})).is_ok());
    }
    let url = json!({"method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": "https://x"}});
    assert!(check_answer(&url, &json!({"action": "accept"})).is_ok());
    for bad in [json!({}), json!({"action": "yes"}), json!({"action": true})] {
        let e = check_answer(&form_request(confirm()), &bad).unwrap_err();
        assert_eq!(e.field, None);
        assert!(e.reason.contains("\"action\" must be"), "{e}");
    }
    let e = check_answer(
        &form_request(confirm()),
        &json!({"action": "accept", "content": "yes"}),
    )
    .unwrap_err();
    assert!(e.reason.contains("\"content\" must be an object"), "{e}");
}

#[test]
fn strings_are_checked_for_length_and_format() {
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 4},
        "mail": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "odd": {"type": "string", "format": "hostname"},
    }});
    let good = json!({"name": "Ünïc", "mail": "a@b.example", "site": "https://example.com/x",
        "day": "2024-02-29", "at": "2024-02-29T10:00:00Z", "odd": "not checked"});
    assert!(check_answer(&form_request(schema.clone()), &accept(good.clone())).is_ok());
    for (field, value, says) in [
        ("name", json!("a"), "at least 2 characters"),
        ("name", json!("abcde"), "at most 4 characters"),
        ("name", json!(5), "expected a string, got the number 5"),
        ("mail", json!("nobody"), "expected an email address"),
        ("mail", json!("a b@c"), "expected an email address"),
        ("site", json!("example.com"), "expected a URI"),
        ("site", json!("1http://x"), "expected a URI"),
        ("day", json!("2023-02-29"), "expected a date"),
        ("day", json!("2024-2-9"), "expected a date"),
        ("at", json!("2024-02-29 10:00"), "expected a date and time"),
    ] {
        let mut content = good.clone();
        content[field] = value;
        let e = refused(schema.clone(), content);
        assert_eq!(e.field.as_deref(), Some(field), "{e}");
        assert!(e.reason.contains(says), "{field}: {e}");
    }
}

#[test]
fn numbers_integers_and_bounds() {
    let schema = json!({"type": "object", "properties": {
        "n": {"type": "number", "minimum": 0.5, "maximum": 10},
        "i": {"type": "integer", "minimum": 1},
    }});
    assert!(
        check_answer(
            &form_request(schema.clone()),
            &accept(json!({"n": 0.5, "i": 3}))
        )
        .is_ok()
    );
    assert!(
        check_answer(
            &form_request(schema.clone()),
            &accept(json!({"n": 10, "i": 2.0}))
        )
        .is_ok()
    );
    for (content, field, says) in [
        (json!({"n": 0.4}), "n", "at least 0.5"),
        (json!({"n": 11}), "n", "at most 10"),
        (json!({"n": "3"}), "n", "(write the number without quotes)"),
        (
            json!({"i": 2.5}),
            "i",
            "expected an integer, got the number 2.5",
        ),
        (json!({"i": 0}), "i", "at least 1"),
        (json!({"i": null}), "i", "expected an integer, got null"),
    ] {
        let e = refused(schema.clone(), content);
        assert_eq!(e.field.as_deref(), Some(field));
        assert!(e.reason.contains(says), "{e}");
    }
}

#[test]
fn every_spelling_of_a_choice_is_understood() {
    let schema = json!({"type": "object", "properties": {
        "plain": {"type": "string", "enum": ["a", "b"]},
        "titled": {"type": "string", "oneOf": [{"const": "x", "title": "Ex"}, {"const": "y", "title": "Why"}]},
        "legacy": {"type": "string", "enum": ["p", "q"], "enumNames": ["Pe", "Qu"]},
        "many": {"type": "array", "items": {"type": "string", "enum": ["r", "s", "t"]}, "minItems": 1, "maxItems": 2},
        "many_titled": {"type": "array", "items": {"anyOf": [{"const": "u", "title": "You"}]}},
    }});
    let form = Form::parse(&schema).unwrap();
    let legacy = form.fields.iter().find(|f| f.name == "legacy").unwrap();
    assert_eq!(
        legacy.kind,
        FieldKind::Choice(vec![
            Choice {
                value: "p".into(),
                title: Some("Pe".into())
            },
            Choice {
                value: "q".into(),
                title: Some("Qu".into())
            },
        ])
    );
    let good = json!({"plain": "a", "titled": "y", "legacy": "q", "many": ["r", "t"], "many_titled": ["u"]});
    assert!(check_answer(&form_request(schema.clone()), &accept(good.clone())).is_ok());
    for (field, value, says) in [
        (
            "plain",
            json!("c"),
            "expected one of \"a\", \"b\", got the string \"c\"",
        ),
        ("titled", json!("Ex"), "one of \"x\", \"y\""),
        ("legacy", json!("Pe"), "one of \"p\", \"q\""),
        ("many", json!("r"), "expected a list of \"r\", \"s\", \"t\""),
        ("many", json!(["r", "z"]), "each item to be one of"),
        ("many", json!([]), "at least 1"),
        ("many", json!(["r", "s", "t"]), "at most 2"),
        ("many_titled", json!(["v"]), "one of \"u\""),
    ] {
        let mut content = good.clone();
        content[field] = value;
        let e = refused(schema.clone(), content);
        assert_eq!(e.field.as_deref(), Some(field), "{e}");
        assert!(e.reason.contains(says), "{field}: {e}");
    }
}

#[test]
fn schemas_it_does_not_understand_never_block_an_answer() {
    for schema in [
        json!(null),
        json!({"type": "object"}),
        json!({"$ref": "#/x"}),
        json!({"type": "object", "properties": "nope"}),
    ] {
        assert!(
            check_answer(
                &form_request(schema),
                &accept(json!({"anything": [1, {"x": 2}]}))
            )
            .is_ok()
        );
    }
    let odd = json!({"type": "object", "properties": {
        "a": {"type": ["string", "null"]},
        "b": {"anyOf": [{"type": "string"}, {"type": "number"}]},
        "c": {"type": "object"},
        "d": {"type": "string", "enum": [1, 2]},
        "e": {"type": "array", "items": {"type": "string"}},
        "f": {"type": "string", "x-custom": {"whatever": true}, "pattern": "^z"},
    }});
    let content = json!({"a": null, "b": 3, "c": {"x": 1}, "d": 7, "e": [1], "f": "a"});
    assert!(check_answer(&form_request(odd), &accept(content)).is_ok());
    // Other request kinds, and unknown methods.
    assert!(check_answer(&json!({"method": "x/y"}), &json!("anything")).is_ok());
    assert!(check_answer(&json!({}), &json!({})).is_ok());
}

#[test]
fn sampling_and_roots_answers_are_checked_for_shape() {
    let sampling =
        json!({"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 10}});
    let good =
        json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"});
    assert!(check_answer(&sampling, &good).is_ok());
    for bad in [
        json!({"action": "accept", "content": {"x": 1}}),
        json!({"role": "assistant", "model": "m"}),
    ] {
        let e = check_answer(&sampling, &bad).unwrap_err();
        assert!(e.reason.contains("a sampling answer needs"), "{e}");
    }
    let roots = json!({"method": "roots/list"});
    assert!(check_answer(&roots, &json!({"roots": [{"uri": "file:///tmp"}]})).is_ok());
    assert!(check_answer(&roots, &json!({"roots": [{"name": "x"}]})).is_err());
    assert!(check_answer(&roots, &json!({"action": "accept"})).is_err());
}

/// A field schema and a value that fits it.
fn field() -> impl Strategy<Value = (Value, Value, bool)> {
    let word = "[a-z]{1,6}";
    prop_oneof![
        any::<bool>().prop_map(|b| (json!({"type": "boolean"}), json!(b), false)),
        (0usize..4, 4usize..8, "[a-zA-Zé ]{0,8}").prop_map(|(min, max, s)| {
            let s: String = s
                .chars()
                .chain(std::iter::repeat('x'))
                .take(s.chars().count().clamp(min, max))
                .collect();
            (
                json!({"type": "string", "minLength": min, "maxLength": max}),
                json!(s),
                false,
            )
        }),
        (-1000i64..1000, 0i64..1000).prop_map(|(lo, span)| {
            (
                json!({"type": "integer", "minimum": lo, "maximum": lo + span}),
                json!(lo + span / 2),
                false,
            )
        }),
        (-1e6f64..1e6).prop_map(|x| (json!({"type": "number"}), json!(x), false)),
        (
            prop::collection::btree_set(word, 1..5),
            any::<prop::sample::Index>()
        )
            .prop_map(|(set, i)| {
                let values: Vec<String> = set.into_iter().collect();
                let pick = i.get(&values).clone();
                (json!({"type": "string", "enum": values}), json!(pick), true)
            }),
        (
            prop::collection::btree_set(word, 1..5),
            any::<prop::sample::Index>()
        )
            .prop_map(|(set, i)| {
                let values: Vec<String> = set.into_iter().collect();
                let pick = i.get(&values).clone();
                let one_of: Vec<Value> = values
                    .iter()
                    .map(|v| json!({"const": v, "title": v.to_uppercase()}))
                    .collect();
                (
                    json!({"type": "string", "oneOf": one_of}),
                    json!(pick),
                    true,
                )
            }),
        (
            prop::collection::btree_set(word, 1..5),
            any::<prop::sample::Index>()
        )
            .prop_map(|(set, i)| {
                let values: Vec<String> = set.into_iter().collect();
                let pick = i.get(&values).clone();
                (
                    json!({"type": "array", "items": {"type": "string", "enum": values}}),
                    json!([pick]),
                    true,
                )
            }),
    ]
}

/// A value of another JSON type than `v` (never one that still fits).
fn flipped(v: &Value) -> Value {
    match v {
        Value::Bool(b) => json!(b.to_string()),
        Value::String(_) => json!(42),
        Value::Number(_) => json!("12"),
        Value::Array(_) => json!(true),
        _ => json!(null),
    }
}

proptest! {
    #[test]
    fn fitting_answers_pass_and_a_flipped_field_fails_naming_it(
        fields in prop::collection::btree_map("[a-z_]{1,8}", (field(), any::<bool>()), 1..6),
        flip in any::<prop::sample::Index>(),
    ) {
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        let mut content = serde_json::Map::new();
        for (name, ((schema, value, _), req)) in &fields {
            properties.insert(name.clone(), schema.clone());
            if *req {
                required.push(name.clone());
            }
            content.insert(name.clone(), value.clone());
        }
        let schema = json!({"type": "object", "properties": properties, "required": required});
        let request = form_request(schema);
        prop_assert!(check_answer(&request, &accept(Value::Object(content.clone()))).is_ok());

        let names: Vec<&String> = fields.keys().collect();
        let target = *flip.get(&names);
        let mut wrong = content.clone();
        wrong.insert(target.clone(), flipped(&content[target]));
        let e = check_answer(&request, &accept(Value::Object(wrong))).unwrap_err();
        prop_assert_eq!(e.field.as_deref(), Some(target.as_str()));
        let prefix = format!("field {target:?}: expected ");
        prop_assert!(e.to_string().starts_with(&prefix), "{}", e);
    }
}
