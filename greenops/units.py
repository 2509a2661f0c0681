"""Unit conversions, in one place. Names carry their units everywhere else (energy_j,
energy_kwh, co2e_g, ...); these are the only factors between them."""

J_PER_KWH = 3_600_000.0
J_PER_WH = 3_600.0
G_PER_KG = 1000.0


def j_to_kwh(energy_j: float | None) -> float | None:
    return None if energy_j is None else energy_j / J_PER_KWH


def j_to_wh(energy_j: float | None) -> float | None:
    return None if energy_j is None else energy_j / J_PER_WH
