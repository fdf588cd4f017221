//! Configs the tests share, kept as files under `tests/data`, and the changes a test makes
//! to one spelled out in code, so that what differs from the shared file is visible where
//! it is used.

use toml::{Table, Value};

/// A config file read into a table.
pub struct Doc(Table);

impl Doc {
    /// `tests/data/two_sites.toml`: sites a and b, servers x and y, www on both by RTT.
    pub fn two_sites() -> Doc {
        Doc::parse(include_str!("../data/two_sites.toml"))
    }

    fn parse(text: &str) -> Doc {
        Doc(text
            .parse()
            .unwrap_or_else(|e| panic!("a shared config is not TOML: {e}")))
    }

    /// Sets `key` of the `[[array]]` entry whose name is `name`.
    pub fn set(&mut self, array: &str, name: &str, key: &str, value: impl Into<Value>) -> &mut Doc {
        let entry = self
            .0
            .get_mut(array)
            .and_then(Value::as_array_mut)
            .and_then(|a| {
                a.iter_mut()
                    .filter_map(Value::as_table_mut)
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
            })
            .unwrap_or_else(|| panic!("no [[{array}]] named {name:?}"));
        entry.insert(key.into(), value.into());
        self
    }

    /// Adds the tables and `[[array]]` entries of `text`: tables it names must be new,
    /// array entries go after the ones there.
    pub fn add(&mut self, text: &str) -> &mut Doc {
        for (key, value) in Doc::parse(text).0 {
            match (self.0.get_mut(&key), value) {
                (Some(Value::Array(have)), Value::Array(more)) => have.extend(more),
                (Some(_), _) => panic!("{key} is in the config already"),
                (None, value) => {
                    self.0.insert(key, value);
                }
            }
        }
        self
    }

    pub fn text(&self) -> String {
        toml::to_string(&self.0).expect("a table serialises")
    }
}
