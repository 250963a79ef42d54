//! `ichnos demo`: records the built-in workload and prints its report.

use std::path::PathBuf;

use anyhow::Result;
use ichnos_profile::{RecordOptions, RecordTarget};

use crate::report::{Format, ReportArgs};

/// Arguments of `ichnos demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// The recording to write (an existing one is kept as FILE.old).
    #[arg(short, long, value_name = "FILE", default_value = "ichnos.data")]
    output: PathBuf,
}

/// Records the demo, then prints the top functions and the call tree.
pub fn demo(args: &DemoArgs, quiet: bool, verbose: bool) -> Result<u8> {
    let command = crate::record::demo_command()?;
    let mut options = RecordOptions::new(RecordTarget::Command(command.clone()));
    options.output.clone_from(&args.output);
    options.command_line = command;
    let summary = crate::record::run(&options, quiet, verbose)?;
    println!();
    crate::report::report(
        &ReportArgs::for_file(&args.output, Format::Top).with_limit(12),
        quiet,
        verbose,
    )?;
    println!();
    crate::report::report(
        &ReportArgs::for_file(&args.output, Format::Tree).with_min_percent(1.0),
        quiet,
        verbose,
    )?;
    if !quiet {
        // The command that shows it: `-i` where it is not the default.
        let shows = if args.output == std::path::Path::new("ichnos.data") {
            "ichnos report".to_owned()
        } else {
            format!("ichnos report -i {}", args.output.display())
        };
        eprintln!(
            "\nThe recording is {}: `{shows}` shows it again (--limit 0 lists every \
             function; or --tree, --format folded, --comm demo-jit).",
            args.output.display()
        );
    }
    Ok(crate::record::exit_code(&summary))
}
