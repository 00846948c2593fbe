"""Operations library behind `p2pctl`: fleet spec, rendering, connectors, launch, tests, diagnose."""
