"""The NIXL/UCX probe (`p2pctl probe-nixl`): `probe` runs two `peer` processes that READ over NIXL, and
`failures` classifies what went wrong from their logs."""
