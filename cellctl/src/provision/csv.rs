//! The provisioning CSV of `cellctl users import`: a header line, then one user per line.
//!
//! ```text
//! contractor_id,login,role,password,cell,status
//! c-20001,tech-1,technician,correct horse battery,cell-02,
//! c-20001,disp-1,dispatcher,another secret,,
//! ```
//!
//! `contractor_id`, `login` and `role` (`technician`, `dispatcher`) are required; `password`
//! is needed for a user that does not exist yet (an existing user's password is never changed
//! by an import); `cell` places a contractor the fleet does not know yet (`--cell` otherwise);
//! `status` is `active` (default) or `disabled`. Columns may come in any order; unknown ones
//! are refused. Every line is parsed before anything is sent, and an error names the line.

use std::io::Read;

use protocol::admin::cell::{Role, UserStatus};
use protocol::{CellId, ContractorId, Login, Password};

use crate::error::{CtlError, Result};

/// The columns a provisioning CSV may have.
pub const COLUMNS: [&str; 6] = [
    "contractor_id",
    "login",
    "role",
    "password",
    "cell",
    "status",
];

/// One line of the CSV.
#[derive(Debug, Clone)]
pub struct Row {
    /// Its line number in the file (1 is the header).
    pub line: u64,
    pub contractor_id: ContractorId,
    pub login: Login,
    pub role: Role,
    pub password: Option<Password>,
    pub cell: Option<CellId>,
    pub status: UserStatus,
}

/// Parses a whole provisioning CSV; the first bad line is an error naming it.
pub fn parse(input: impl Read) -> Result<Vec<Row>> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(false)
        .from_reader(input);
    let headers = reader
        .headers()
        .map_err(|e| bad(1, &format!("cannot read the header: {e}")))?
        .clone();
    let mut index = [None; COLUMNS.len()];
    for (i, h) in headers.iter().enumerate() {
        match COLUMNS.iter().position(|c| *c == h) {
            Some(k) if index[k].is_none() => index[k] = Some(i),
            Some(_) => return Err(bad(1, &format!("column `{h}` given twice"))),
            None => {
                return Err(bad(
                    1,
                    &format!("unknown column `{h}` (known: {})", COLUMNS.join(", ")),
                ));
            }
        }
    }
    for required in 0..3 {
        if index[required].is_none() {
            return Err(bad(
                1,
                &format!("the header lacks the column `{}`", COLUMNS[required]),
            ));
        }
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            bad(line, &e.to_string())
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let field = |k: usize| -> &str { index[k].and_then(|i| record.get(i)).unwrap_or_default() };
        let contractor_id =
            ContractorId::new(field(0)).map_err(|e| bad(line, &format!("contractor_id: {e}")))?;
        if contractor_id.is_synthetic() {
            return Err(bad(
                line,
                &format!(
                    "{contractor_id} is in the range reserved for game days ({}…)",
                    protocol::SYNTHETIC_CONTRACTOR_PREFIX
                ),
            ));
        }
        let login = Login::new(field(1)).map_err(|e| bad(line, &format!("login: {e}")))?;
        let role = Role::parse(field(2)).ok_or_else(|| {
            bad(
                line,
                &format!("role `{}`: technician or dispatcher", field(2)),
            )
        })?;
        let password = match field(3) {
            "" => None,
            p => Some(Password::new(p).map_err(|e| bad(line, &format!("password: {e}")))?),
        };
        let cell = match field(4) {
            "" => None,
            c => Some(CellId::new(c).map_err(|e| bad(line, &format!("cell: {e}")))?),
        };
        let status = match field(5) {
            "" => UserStatus::Active,
            s => UserStatus::parse(s)
                .ok_or_else(|| bad(line, &format!("status `{s}`: active or disabled")))?,
        };
        rows.push(Row {
            line,
            contractor_id,
            login,
            role,
            password,
            cell,
            status,
        });
    }
    Ok(rows)
}

fn bad(line: u64, what: &str) -> CtlError {
    CtlError::BadRequest(format!("line {line}: {what}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn columns_in_any_order_and_optional_ones_empty() {
        let rows = parse(
            "role,login,contractor_id,password\n\
             technician,tech-1,c-20001,\"pass, with a comma\"\n\
             dispatcher,disp-1,c-20001,\n"
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].line, 2);
        assert_eq!(rows[0].login.as_str(), "tech-1");
        assert_eq!(
            rows[0].password.as_ref().unwrap().expose(),
            "pass, with a comma"
        );
        assert_eq!(rows[1].role, Role::Dispatcher);
        assert!(rows[1].password.is_none());
        assert_eq!(rows[1].status, UserStatus::Active);
    }

    #[test]
    fn a_bad_line_is_named_and_nothing_is_returned() {
        let cases = [
            (
                "contractor_id,login\nc-1,a\n",
                "line 1: the header lacks the column `role`",
            ),
            ("contractor_id,login,role,pin\n", "unknown column `pin`"),
            (
                "contractor_id,login,role\nc-1,a,technician\nc-1,b,admin\n",
                "line 3: role `admin`",
            ),
            (
                "contractor_id,login,role\nc-synthetic-cell-01-0001,a,technician\n",
                "line 2: c-synthetic-cell-01-0001 is in the range reserved for game days",
            ),
            ("contractor_id,login,role\nc-1,a\n", "line 2"),
            (
                "contractor_id,login,role,status\nc-1,a,technician,gone\n",
                "status `gone`",
            ),
        ];
        for (csv, want) in cases {
            let e = parse(csv.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(want), "{csv:?}: {e}");
        }
    }
}
