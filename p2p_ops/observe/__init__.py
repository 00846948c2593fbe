"""What a run leaves and how it is shown: per-request records, statistics, plots and charts, the Markdown
report, the live monitor and the Grafana dashboard."""
