"""Unit conversions, in one place. Names carry their units everywhere else (energy_j,
energy_kwh, co2e_g, ...); these are the only factors between them."""

J_PER_KWH = 3_600_000.0
J_PER_WH = 3_600.0
G_PER_KG = 1000.0


def j_to_kwh(energy_j: float | None) -> float | None:
    return None if energy_j is None else energy_j / J_PER_KWH


def j_to_wh(energy_j: float | None) -> float | None:
    return None if energy_j is None else energy_j / J_PER_WH


def plural(count: float | int, word: str, words: str | None = None) -> str:
    """A count with its noun in the right number, as Django's |pluralize does on pages:
    plural(1, "minute") -> "1 minute", plural(2, "GPU") -> "2 GPUs", plural(1.5, "day") ->
    "1.5 days", plural(1000, "GPU") -> "1,000 GPUs". Only exactly one takes the singular."""
    number = f"{count:,}" if isinstance(count, int) else str(count)
    return f"{number} {word if count == 1 else (words or word + 's')}"
