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


def amount(value: float | None, unit: str = "") -> str:
    """A figure with its unit as a person writes it, never in exponent notation: amounts in
    USD as money (amount(60000, "USD") -> "$60,000", amount(12.5, "USD") -> "$12.50",
    amount(0.0123, "USD") -> "$0.0123"); others with thousands separators from 1,000 up and
    four significant digits below (amount(60000, "kg CO2e") -> "60,000 kg CO2e",
    amount(3.5, "GPU-hours") -> "3.5 GPU-hours")."""
    if value is None:
        return "unknown"
    size = abs(value)
    if unit == "USD":
        sign = "-" if value < 0 else ""
        if size >= 1000:
            return f"{sign}${size:,.0f}"
        return f"{sign}${size:,.2f}" if size >= 1 or size == 0 else f"{sign}${size:.4g}"
    text = f"{value:,.0f}" if size >= 1000 else f"{value:,.4g}"
    return f"{text} {unit}".strip()
