//! The `room_auth_url` target: `RoomInfo::auth_url`.

use super::*;

/// Input of the `room_auth_url` target. First byte even: the rest is the JSON text of
/// `nodeProperties` in a room's wire form (`null`, an object, or something that fails to
/// parse). First byte odd: the rest drives a generator of `node_properties` maps whose keys are
/// often `authUrl` and whose values are arbitrary JSON.
pub fn fuzz_room_auth_url(data: &[u8]) {
    let [mode, rest @ ..] = data else {
        return;
    };
    if mode & 1 == 0 {
        let mut wire =
            br#"{"host":"h","port":1,"protocol":"tcp","roomId":"r","nodeProperties":"#.to_vec();
        wire.extend_from_slice(rest);
        wire.push(b'}');
        if let Ok(room) = serde_json::from_slice::<RoomInfo>(&wire) {
            check_room_auth_url(room.node_properties);
        }
    } else if let Ok(props) = arbitrary_node_properties(&mut Unstructured::new(rest)) {
        check_room_auth_url(props);
    }
}

/// `RoomInfo::auth_url` follows the rule: absent properties or key, or `null`: `""`; a JSON
/// string: as it is; anything else: its compact JSON text (written here by a reference writer);
/// and `RoomJoinArgs` carries the same value.
pub fn check_room_auth_url(node_properties: Option<Map<String, Value>>) {
    let want = match node_properties.as_ref().and_then(|p| p.get("authUrl")) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            let mut text = String::new();
            reference_json_text(other, &mut text);
            text
        }
    };
    let room = RoomInfo {
        host: "h".into(),
        port: 1,
        protocol: "tcp".into(),
        room_id: "r".into(),
        node_properties,
    };
    let got = room.auth_url();
    assert_eq!(got, want, "auth_url of {:?}", room.node_properties);
    assert_eq!(RoomJoinArgs::new(&room, Map::new()).auth_url, got);
}

/// Compact JSON, as RFC 8259 writes it with serde_json's escapes: `\"`, `\\`, `\b`, `\f`,
/// `\n`, `\r`, `\t`, other control characters as `\u00xx`, everything else as it is.
fn reference_json_text(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                reference_json_text(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                reference_json_text(&Value::String(key.clone()), out);
                out.push(':');
                reference_json_text(item, out);
            }
            out.push('}');
        }
    }
}

fn arbitrary_node_properties(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<Option<Map<String, Value>>> {
    if !u.arbitrary::<bool>()? {
        return Ok(None);
    }
    let mut map = Map::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let key = match u.int_in_range(0..=3)? {
            0 | 1 => "authUrl".to_owned(),
            2 => "authurl".to_owned(),
            _ => u.arbitrary::<String>()?,
        };
        map.insert(key, arbitrary_json(u, 0)?);
    }
    Ok(Some(map))
}

fn arbitrary_json(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<Value> {
    let last_kind = if depth >= 4 { 5 } else { 7 };
    Ok(match u.int_in_range(0..=last_kind)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::from(u.arbitrary::<u64>()?),
        4 => Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        5 => Value::String(u.arbitrary()?),
        6 => {
            let mut items = Vec::new();
            for _ in 0..u.int_in_range(0..=3)? {
                items.push(arbitrary_json(u, depth + 1)?);
            }
            Value::Array(items)
        }
        _ => {
            let mut map = Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                map.insert(u.arbitrary()?, arbitrary_json(u, depth + 1)?);
            }
            Value::Object(map)
        }
    })
}

// ---------------------------------------------------------------------------------------------
// shared helpers
// ---------------------------------------------------------------------------------------------
