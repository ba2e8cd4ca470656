"""A seeded text generator: plausible sentences in four languages from a tiny grammar.

The word lists are our own, written here, so generated pages copy no one's text.
Noun phrases carry their article (and case, in German) so the grammar needs no agreement rules.
"""
from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Lexicon:
    subjects: tuple[str, ...]     # noun phrases usable as grammatical subject
    objects: tuple[str, ...]      # noun phrases usable as direct object
    verbs: tuple[str, ...]        # past tense, third person singular
    adverbials: tuple[str, ...]   # time/place/manner phrases that end a clause
    connectives: tuple[str, ...]  # sentence openers
    templates: tuple[str, ...]    # sentence shapes over {S} {s} {V} {O} {A} {C}


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.strip() for w in text.split("|") if w.strip())


LEXICONS: dict[str, Lexicon] = {
    "en": Lexicon(
        subjects=_words("the city council|a local teacher|the new museum|our editorial team|the river authority|"
                        "a small bakery|the public library|the research group|the harbour master|the old railway company|"
                        "a young architect|the regional hospital|the football club|a volunteer group|the school board|"
                        "the transport office|a retired engineer|the weather service|the farmers' market|the mayor"),
        objects=_words("the annual budget|a new bicycle lane|the flood barrier|the summer festival|a detailed report|"
                       "the night bus service|the water supply|a public survey|the historic bridge|the solar panels|"
                       "a reading programme|the parking rules|the community garden|the station roof|a lost manuscript|"
                       "the harbour crane|the evening lectures|a cheaper ticket|the recycling plan|the town archive"),
        verbs=_words("announced|reviewed|opened|supported|questioned|described|planned|repaired|celebrated|measured|"
                     "postponed|defended|criticised|presented|funded|inspected|replaced|discussed|approved|rejected"),
        adverbials=_words("in the morning|after the meeting|near the harbour|during the winter|with little warning|"
                          "for the first time|across the region|before the holidays|despite the rain|at short notice|"
                          "in front of a large crowd|without much debate|later than expected|on Tuesday evening"),
        connectives=_words("However|Meanwhile|In addition|According to witnesses|Later that week|As a result|"
                           "At the same time|Surprisingly|Earlier this year|For now"),
        templates=("{S} {V} {O} {A}.", "{C}, {s} {V} {O}.", "{S} said that {s} {V} {O} {A}.",
                   "{S} {V} {O}, and {s} {V} {O} {A}.", "{C}, {s} {V} {O} {A}."),
    ),
    "de": Lexicon(
        subjects=_words("der Stadtrat|eine Lehrerin|das neue Museum|unsere Redaktion|die Wasserbehörde|eine kleine Bäckerei|"
                        "die Stadtbibliothek|die Forschungsgruppe|der Hafenmeister|die alte Bahngesellschaft|"
                        "ein junger Architekt|das Kreiskrankenhaus|der Fußballverein|eine Bürgerinitiative|"
                        "die Schulbehörde|das Verkehrsamt|ein pensionierter Ingenieur|der Wetterdienst|die Bürgermeisterin"),
        objects=_words("den Jahreshaushalt|einen neuen Radweg|das Hochwassertor|das Sommerfest|einen ausführlichen Bericht|"
                       "den Nachtbus|die Wasserversorgung|eine öffentliche Umfrage|die historische Brücke|die Solaranlage|"
                       "ein Leseprogramm|die Parkregeln|den Gemeinschaftsgarten|das Bahnhofsdach|eine verschollene Handschrift|"
                       "den Hafenkran|die Abendvorträge|eine günstigere Fahrkarte|den Müllplan|das Stadtarchiv"),
        verbs=_words("besuchte|prüfte|eröffnete|unterstützte|beschrieb|plante|reparierte|feierte|vermaß|verschob|"
                     "verteidigte|kritisierte|präsentierte|finanzierte|besichtigte|ersetzte|diskutierte|genehmigte|lobte"),
        adverbials=_words("am Morgen|nach der Sitzung|in der Nähe des Hafens|während des Winters|ohne Vorwarnung|"
                          "zum ersten Mal|in der ganzen Region|vor den Feiertagen|trotz des Regens|kurzfristig|"
                          "vor großem Publikum|ohne lange Debatte|später als erwartet|am Dienstagabend"),
        connectives=_words("Danach|Inzwischen|Außerdem|Laut Augenzeugen|Später|Deshalb|Gleichzeitig|Überraschenderweise|"
                           "Anfang des Jahres|Vorerst"),
        templates=("{S} {V} {O} {A}.", "{C} {V} {s} {O}.", "{S} {V} {O}, und {s} {V} {O} {A}.",
                   "{C} {V} {s} {O} {A}."),
    ),
    "fr": Lexicon(
        subjects=_words("le conseil municipal|une enseignante|le nouveau musée|notre rédaction|l'agence de l'eau|"
                        "une petite boulangerie|la bibliothèque municipale|le groupe de recherche|le capitaine du port|"
                        "la vieille compagnie ferroviaire|un jeune architecte|l'hôpital régional|le club de football|"
                        "une association de bénévoles|le rectorat|le service des transports|un ingénieur retraité|la maire"),
        objects=_words("le budget annuel|une nouvelle piste cyclable|la digue|le festival d'été|un rapport détaillé|"
                       "le bus de nuit|l'approvisionnement en eau|une enquête publique|le pont historique|"
                       "les panneaux solaires|un programme de lecture|les règles de stationnement|le jardin partagé|"
                       "le toit de la gare|un manuscrit perdu|la grue du port|les conférences du soir|un billet moins cher"),
        verbs=_words("a annoncé|a examiné|a inauguré|a soutenu|a décrit|a planifié|a réparé|a célébré|a mesuré|a reporté|"
                     "a défendu|a critiqué|a présenté|a financé|a inspecté|a remplacé|a discuté|a approuvé|a refusé"),
        adverbials=_words("dans la matinée|après la réunion|près du port|pendant l'hiver|sans prévenir|"
                          "pour la première fois|dans toute la région|avant les fêtes|malgré la pluie|à la dernière minute|"
                          "devant une foule nombreuse|sans grand débat|plus tard que prévu|mardi soir"),
        connectives=_words("Cependant|Entre-temps|Par ailleurs|Selon les témoins|Plus tard|En conséquence|"
                           "Au même moment|Étonnamment|Depuis le début de l'année|Pour l'instant"),
        templates=("{S} {V} {O} {A}.", "{C}, {s} {V} {O}.", "{S} a expliqué que {s} {V} {O} {A}.",
                   "{S} {V} {O}, et {s} {V} {O} {A}."),
    ),
    "es": Lexicon(
        subjects=_words("el ayuntamiento|una maestra|el nuevo museo|nuestro equipo|la agencia del agua|una pequeña panadería|"
                        "la biblioteca pública|el grupo de investigación|el capitán del puerto|la vieja compañía ferroviaria|"
                        "un joven arquitecto|el hospital regional|el club de fútbol|una asociación de vecinos|"
                        "la dirección del colegio|la oficina de transporte|un ingeniero jubilado|la alcaldesa"),
        objects=_words("el presupuesto anual|un nuevo carril bici|el dique|el festival de verano|un informe detallado|"
                       "el autobús nocturno|el suministro de agua|una encuesta pública|el puente histórico|"
                       "los paneles solares|un programa de lectura|las normas de aparcamiento|el huerto comunitario|"
                       "el tejado de la estación|un manuscrito perdido|la grúa del puerto|un billete más barato"),
        verbs=_words("anunció|revisó|inauguró|apoyó|describió|planificó|reparó|celebró|midió|aplazó|defendió|criticó|"
                     "presentó|financió|inspeccionó|sustituyó|discutió|aprobó|rechazó|diseñó"),
        adverbials=_words("por la mañana|después de la reunión|cerca del puerto|durante el invierno|sin previo aviso|"
                          "por primera vez|en toda la región|antes de las fiestas|a pesar de la lluvia|en el último momento|"
                          "ante un público numeroso|sin mucho debate|más tarde de lo previsto|el martes por la noche"),
        connectives=_words("Sin embargo|Mientras tanto|Además|Según los testigos|Más tarde|Por eso|Al mismo tiempo|"
                           "Sorprendentemente|A principios de año|Por ahora"),
        templates=("{S} {V} {O} {A}.", "{C}, {s} {V} {O}.", "{S} explicó que {s} {V} {O} {A}.",
                   "{S} {V} {O}, y {s} {V} {O} {A}."),
    ),
}


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


class TextGenerator:
    """Sentences, paragraphs and titles from one language's lexicon and one `random.Random`."""

    def __init__(self, language: str, rng: random.Random):
        if language not in LEXICONS:
            raise ValueError(f"no lexicon for language {language!r}; known: {sorted(LEXICONS)}")
        self.language = language
        self.lexicon = LEXICONS[language]
        self.rng = rng

    def sentence(self) -> str:
        lex, pick = self.lexicon, self.rng.choice
        template = pick(lex.templates)
        # Each placeholder is filled independently, so fill them one by one rather than with str.format.
        out = template
        for key, choices in (("{S}", lex.subjects), ("{s}", lex.subjects), ("{V}", lex.verbs),
                             ("{O}", lex.objects), ("{A}", lex.adverbials), ("{C}", lex.connectives)):
            while key in out:
                out = out.replace(key, pick(choices), 1)
        return _capitalize(out)

    def paragraph(self, sentences_min: int, sentences_max: int) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(sentences_min, sentences_max)))

    def paragraphs(self, cfg) -> list[str]:
        count = self.rng.randint(cfg.paragraphs_min, cfg.paragraphs_max)
        return [self.paragraph(cfg.sentences_min, cfg.sentences_max) for _ in range(count)]

    def title(self) -> str:
        lex, pick = self.lexicon, self.rng.choice
        return _capitalize(f"{pick(lex.subjects)} {pick(lex.verbs)} {pick(lex.objects)}")

    def near_duplicate(self, paragraphs: list[str], changed_words: int) -> tuple[list[str], int]:
        """The same paragraphs with `changed_words` words replaced by words from the lexicon."""
        words = [p.split(" ") for p in paragraphs]
        spots = [(i, j) for i, p in enumerate(words) for j in range(len(p))]
        replacements = " ".join(self.lexicon.objects + self.lexicon.adverbials).split()
        changed = 0
        for i, j in self.rng.sample(spots, min(changed_words, len(spots))):
            old = words[i][j]
            core = old.rstrip(".,")
            new = self.rng.choice(replacements)
            if new != core:
                # Keep the sentence punctuation and capitalisation so only the word itself differs.
                new = _capitalize(new) if core[:1].isupper() else new
                words[i][j] = new + old[len(core):]
                changed += 1
        return [" ".join(p) for p in words], changed
