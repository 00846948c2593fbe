"""The test harness: requests against a running fleet, measured and recorded in a run folder."""
