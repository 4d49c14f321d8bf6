//! `key-rotation`: every cell of the game day rotates its signing keys under load. Sessions
//! signed by the key that just retired keep working (the edges hold it until they expire),
//! and sign-ins right after are signed by the new current key and served at once.

use crate::admin::Api;
use crate::error::Result;
use crate::gameday::run::Run;
use crate::gameday::scenario::Scenario;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "key-rotation",
    proves: "a signing-key rotation under load fails no request: old sessions keep working, new ones are served at once",
    plan: |cells, _, d| {
        vec![
            "every synthetic technician signs in; route loads and completions".to_owned(),
            format!(
                "after {} s, keys rotated at {} cells",
                d.as_secs() / 2,
                cells.len()
            ),
            "every technician signs in again (new key) and those sessions join the load".to_owned(),
        ]
    },
    targets: crate::gameday::scenario::none,
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let techs = r.ctx.pop.technicians.clone();
    let sessions = r.sign_in(&techs).await;
    let load = r.load(sessions);
    r.hold(r.ctx.duration / 2).await;
    let start = r.ms();
    let mut rotated = 0u64;
    for cell in r.ctx.cells.clone() {
        let auth = Api::auth(r.ctx.cell(&cell)?)?;
        let k = r.ctx.admin.rotate_keys(&auth).await?;
        r.mark(
            format!("{cell}: keys rotated (current {})", k.current),
            start,
        );
        rotated += 1;
    }
    let fresh = r.sign_in(&techs).await;
    let fresh_load = r.load(fresh.clone());
    r.hold(r.ctx.duration / 2).await;
    let _ = fresh_load.stop().await;
    let _ = load.stop().await;
    r.load_figures();
    r.figure("cells_rotated", rotated as f64, "count");
    r.figure("sign_ins_after_rotation_ok", fresh.len() as f64, "count");
    r.bound("sign_ins_after_rotation_ok", ">=", techs.len() as f64);
    r.bound("requests_failed_before_cell", "==", 0.0);
    r.bound("requests_failed_in_cell", "==", 0.0);
    Ok(())
}
