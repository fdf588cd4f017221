pub fn run() -> anyhow::Result<()> { anyhow::bail!("demo: not written yet") }
