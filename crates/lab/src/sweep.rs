//! Expansion of a [`Plan`] into [`Point`]s: `[base]` (with `[quick].base` laid over it under
//! `--quick`), then for each `[[sweep]]` in file order its combinations of values (with
//! `[quick].sweep.<name>` replacing lists under `--quick`) laid over the base.
//!
//! Points are numbered in that order, which is also the order of the output rows whatever order
//! they finish in. `product` sweeps vary their first parameter slowest, like nested loops written
//! in the order of the file; `zip` sweeps walk their lists side by side.

use crate::error::LabError;
use crate::plan::{Combine, Plan};
use crate::point::Point;

impl Plan {
    /// The points the plan runs, `quick` applying `[quick]`.
    pub fn points(&self, quick: bool) -> Result<Vec<Point>, LabError> {
        let mut base = self.base.clone();
        if quick {
            for (name, value) in &self.quick.base {
                base.insert(name.clone(), value.clone());
            }
        }
        if self.sweeps.is_empty() {
            return Ok(vec![Point {
                index: 0,
                sweep: "base".to_string(),
                params: base,
            }]);
        }
        let mut points = Vec::new();
        for (i, sweep) in self.sweeps.iter().enumerate() {
            let mut params = sweep.params.clone();
            if quick {
                if let Some(overrides) =
                    self.quick.sweep.get(&sweep.name).and_then(|v| v.as_table())
                {
                    for (name, values) in overrides {
                        params.insert(name.clone(), values.clone());
                    }
                }
                // Overrides may change lengths: check the zip rule again on the result.
                self.check_sweep_params(
                    &format!("quick.sweep.{}", sweep.name),
                    sweep.combine,
                    &params,
                )?;
            }
            let lists: Vec<(&String, &Vec<toml::Value>)> = params
                .iter()
                .map(|(name, values)| match values {
                    toml::Value::Array(a) => Ok((name, a)),
                    _ => Err(self.field_error(
                        format!("sweep[{i}].params.{name}"),
                        "expected a list of values",
                    )),
                })
                .collect::<Result<_, _>>()?;
            for combination in combinations(sweep.combine, &lists) {
                let mut merged = base.clone();
                for (name, value) in combination {
                    merged.insert(name.clone(), value.clone());
                }
                points.push(Point {
                    index: points.len(),
                    sweep: sweep.name.clone(),
                    params: merged,
                });
            }
        }
        Ok(points)
    }
}

/// The (parameter, value) combinations of one sweep, in order.
fn combinations<'a>(
    combine: Combine,
    lists: &[(&'a String, &'a Vec<toml::Value>)],
) -> Vec<Vec<(&'a String, &'a toml::Value)>> {
    match combine {
        Combine::Zip => {
            let n = lists.iter().map(|(_, v)| v.len()).min().unwrap_or(0);
            (0..n)
                .map(|i| {
                    lists
                        .iter()
                        .map(|(name, values)| (*name, &values[i]))
                        .collect()
                })
                .collect()
        }
        Combine::Product => {
            let mut out: Vec<Vec<(&String, &toml::Value)>> = vec![Vec::new()];
            for (name, values) in lists {
                out = out
                    .into_iter()
                    .flat_map(|prefix| {
                        values.iter().map(move |v| {
                            let mut next = prefix.clone();
                            next.push((*name, v));
                            next
                        })
                    })
                    .collect();
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::Plan;

    const PLAN: &str = r#"
        [experiment]
        name = "t"
        title = "T"
        [columns]
        a = "A"
        [base]
        a = 0
        b = "fixed"
        d = 1
        [[sweep]]
        name = "grid"
        [sweep.params]
        a = [1, 2]
        c = ["x", "y", "z"]
        [[sweep]]
        name = "pairs"
        combine = "zip"
        [sweep.params]
        a = [10, 20]
        c = ["p", "q"]
        [quick]
        base = { d = 2 }
        sweep.grid = { c = ["x"] }
    "#;

    fn summary(points: &[crate::Point]) -> Vec<String> {
        points
            .iter()
            .map(|p| {
                format!(
                    "{}:{}:{}{}:{}",
                    p.index,
                    p.sweep,
                    p.params["a"],
                    p.params["c"].as_str().unwrap_or("?"),
                    p.params["d"]
                )
            })
            .collect()
    }

    #[test]
    fn product_then_zip_in_file_order() {
        let plan = Plan::parse(PLAN, "test").expect("plan parses");
        let points = plan.points(false).expect("points expand");
        assert_eq!(
            summary(&points),
            [
                "0:grid:1x:1",
                "1:grid:1y:1",
                "2:grid:1z:1",
                "3:grid:2x:1",
                "4:grid:2y:1",
                "5:grid:2z:1",
                "6:pairs:10p:1",
                "7:pairs:20q:1"
            ]
        );
        assert!(points
            .iter()
            .all(|p| p.params["b"].as_str() == Some("fixed")));
    }

    #[test]
    fn quick_overrides_base_and_sweep_lists() {
        let plan = Plan::parse(PLAN, "test").expect("plan parses");
        let points = plan.points(true).expect("points expand");
        assert_eq!(
            summary(&points),
            [
                "0:grid:1x:2",
                "1:grid:2x:2",
                "2:pairs:10p:2",
                "3:pairs:20q:2"
            ]
        );
    }

    #[test]
    fn no_sweep_is_one_base_point() {
        let plan = Plan::parse(
            "[experiment]\nname = \"t\"\ntitle = \"T\"\n[columns]\na = \"A\"\n[base]\na = 3\n",
            "test",
        )
        .expect("plan parses");
        let points = plan.points(false).expect("points expand");
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].sweep, "base");
        assert_eq!(points[0].params["a"].as_integer(), Some(3));
    }

    #[test]
    fn zip_of_unequal_lengths_names_the_field() {
        let text = PLAN.replace("a = [10, 20]", "a = [10, 20, 30]");
        let e = Plan::parse(&text, "test").unwrap_err().to_string();
        assert!(e.contains("sweep[1].params.c") && e.contains("zip"), "{e}");
    }
}
