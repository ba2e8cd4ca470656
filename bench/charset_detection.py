"""Benchmark: which detector names the charset of a page whose declaration is wrong or missing.

    .venv/bin/python bench/charset_detection.py [--pages 20] [--seed 0]

`jobs.text.decode.decode_html` reaches detection only for bytes that neither the declared charset nor UTF-8 decodes:
a legacy page declaring UTF-8 (or nothing).  This builds such pages from sentences in 13 languages, each encoded in
its legacy code pages (17: windows-125x, ISO-8859-x, KOI8-R, Shift_JIS, EUC-JP, GB18030, Big5, EUC-KR, cp874), as
three shapes: a whole page in the language; one sentence of it in an English page (a name, a quote, a place); a
short page (one sentence, under 1 KB).  Every page declares `<meta charset="utf-8">`.  A detector scores a page when
its codec decodes the bytes to exactly the text that was encoded.  Compared, in one process on the same pages:
- charset-normalizer's best match, as `decode_html` used it (pages under 1,024 bytes not detected: fallback);
- chardetng (Firefox's detector, `chardetng_py.detect`), on the whole page, with and without the URL's TLD;
- `decode_html` itself, as extract calls it (conf's charset aliases, the TLD): the codec it reports.
Prints the share of pages decoded exactly, per shape and per code page, and each detector's time per page.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (language, TLD, code pages, sentences); every sentence is encodable in each of its code pages
LANGUAGES = (
    ("fr", "fr", ("cp1252", "iso8859_15"), (
        "Le comité s'est réuni mardi à la mairie pour discuter du budget.",
        "Il était très content d'aller à la plage avec son père.",
        "La première fois, c'était en février, après la fête de Noël.",
        "Où sont les élèves qui ont gagné le concours de l'année dernière ?")),
    ("es", "es", ("cp1252",), (
        "El niño fue a la montaña con su padre el miércoles.",
        "Mañana irán al mercado para comprar piñas y café.",
        "¿Qué más necesitan para la reunión de la próxima semana?",
        "La población de la región aumentó según el último censo.")),
    ("de", "de", ("cp1252", "iso8859_15"), (
        "Der Ausschuss tagte am Dienstag, um den Haushalt der Stadt zu besprechen.",
        "Die Mitglieder sagten, der Plan würde neue Grünanlagen finanzieren.",
        "Straßen werden repariert und mehr Lehrer für die Schüler eingestellt.",
        "Das Geschäft öffnet um neun Uhr und schließt um acht.")),
    ("pt", "br", ("cp1252",), (
        "A criança foi à escola com a mãe na terça-feira.",
        "Não sabíamos que a informação estava lá, disse o cidadão.",
        "A população da região aumentou e as eleições serão em outubro.",
        "O preço do pão e do feijão subiu no último mês.")),
    ("pl", "pl", ("cp1250", "iso8859_2"), (
        "Komisja zebrała się we wtorek, aby omówić budżet miasta.",
        "Członkowie powiedzieli, że plan sfinansuje nowe parki i naprawi drogi.",
        "Mieszkańcy są zadowoleni z decyzji rady, choć koszty są wysokie.",
        "Zażółć gęślą jaźń, powtarzał nauczyciel na każdej lekcji.")),
    ("cs", "cz", ("cp1250", "iso8859_2"), (
        "Výbor se sešel v úterý, aby projednal rozpočet města.",
        "Členové uvedli, že plán bude financovat nové parky a opravy silnic.",
        "Příliš žluťoučký kůň úpěl ďábelské ódy.",
        "Občané jsou spokojeni, ale kritici říkají, že je to příliš drahé.")),
    ("ru", "ru", ("cp1251", "koi8_r", "iso8859_5"), (
        "Комитет собрался во вторник, чтобы обсудить бюджет города.",
        "Жители довольны решением совета, хотя расходы очень высоки.",
        "Новый парк откроется весной, сообщили в администрации.",
        "Цены на хлеб, молоко и яйца остались прежними в этом месяце.")),
    ("el", "gr", ("cp1253", "iso8859_7"), (
        "Η επιτροπή συνεδρίασε την Τρίτη για να συζητήσει τον προϋπολογισμό της πόλης.",
        "Οι κάτοικοι είναι ικανοποιημένοι με την απόφαση του συμβουλίου.",
        "Το νέο πάρκο θα ανοίξει την άνοιξη, ανακοίνωσε ο δήμαρχος.",
        "Οι τιμές του ψωμιού και του γάλακτος έμειναν ίδιες.")),
    ("tr", "tr", ("cp1254", "iso8859_9"), (
        "Komite, şehrin bütçesini görüşmek için salı günü toplandı.",
        "Üyeler, planın yeni parkları finanse edeceğini söyledi.",
        "Şehir sakinleri kararın çok pahalı olduğunu düşünüyor.",
        "Ekmek ve süt fiyatları bu ay değişmedi.")),
    ("ja", "jp", ("shift_jis", "euc_jp"), (
        "委員会は火曜日に市の予算について話し合うために集まった。",
        "新しい公園は春に開園すると市長が発表した。",
        "住民は議会の決定に満足しているが、費用は高いと言う。",
        "今月はパンと牛乳の値段が変わらなかった。")),
    ("zh-Hans", "cn", ("gb18030",), (
        "委员会周二开会讨论城市的预算。",
        "新公园将于春天开放，市长宣布。",
        "居民对议会的决定感到满意，但费用很高。",
        "本月面包和牛奶的价格没有变化。")),
    ("zh-Hant", "tw", ("big5",), (
        "委員會週二開會討論城市的預算。",
        "新公園將於春天開放，市長宣布。",
        "居民對議會的決定感到滿意，但費用很高。",
        "本月麵包和牛奶的價格沒有變化。")),
    ("ko", "kr", ("euc_kr",), (
        "위원회는 화요일에 시의 예산을 논의하기 위해 모였다.",
        "새 공원은 봄에 문을 열 것이라고 시장이 발표했다.",
        "주민들은 의회의 결정에 만족하지만 비용이 높다고 말한다.",
        "이번 달 빵과 우유 가격은 변하지 않았다.")),
    ("th", "th", ("cp874",), (
        "คณะกรรมการประชุมกันในวันอังคารเพื่อหารือเกี่ยวกับงบประมาณของเมือง",
        "สวนสาธารณะแห่งใหม่จะเปิดในฤดูใบไม้ผลิ นายกเทศมนตรีประกาศ",
        "ชาวบ้านพอใจกับการตัดสินใจของสภา แต่ค่าใช้จ่ายสูง",
        "ราคาขนมปังและนมไม่เปลี่ยนแปลงในเดือนนี้")),
)
ENGLISH = ("The committee met on Tuesday to discuss the city budget.", "Members said the plan would fund new parks.",
           "Critics argued that the costs were far too high.", "The new library opens in June on Main Street.")
NAV = '<div class="nav"><a href="/">Home</a> <a href="/news">News</a> <a href="/contact">Contact</a></div>\n'
SHAPES = ("whole page", "one sentence in an English page", "short page (< 1 KB)")


def page(shape: str, sentences, rng: random.Random) -> str:
    head = '<!doctype html><html><head><meta charset="utf-8"><title>Page</title></head><body>\n'
    if shape == SHAPES[2]:
        return head + f"<p>{rng.choice(sentences)}</p>\n</body></html>"
    pool = sentences if shape == SHAPES[0] else ENGLISH
    body = [NAV if i % 6 == 0 else f"<p>{rng.choice(pool)} {rng.choice(pool)}</p>\n" for i in range(40)]
    if shape == SHAPES[1]:
        body.insert(20, f"<p>{rng.choice(sentences)}</p>\n")
    return head + "".join(body) + "</body></html>"


def charset_normalizer_codec(data: bytes) -> str | None:
    import charset_normalizer

    if len(data) < 1024:      # decode_html's old floor: below it, the counted fallback
        return None
    best = charset_normalizer.from_bytes(data[:65536]).best()
    return best.encoding if best is not None else None


def chardetng_codec(data: bytes, tld: str | None = None) -> str:
    import chardetng_py

    return chardetng_py.detect(data, allow_utf8=False, tld=tld.encode() if tld else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=20, help="pages per language, code page and shape")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    from jobs.config import load_jobs_config
    from jobs.text.decode import decode_html

    cfg = load_jobs_config().extract
    detectors = {"charset-normalizer (>= 1 KB)": lambda data, tld: charset_normalizer_codec(data),
                 "chardetng": lambda data, tld: chardetng_codec(data),
                 "chardetng + TLD": chardetng_codec,
                 "decode_html": lambda data, tld: decode_html(data, "utf-8", aliases=cfg.charset_aliases,
                                                              tld=tld).encoding}
    right: dict = defaultdict(int)
    seen: dict = defaultdict(int)
    spent: dict = defaultdict(float)
    for language, tld, codecs_, sentences in LANGUAGES:
        for codec in codecs_:
            for shape in SHAPES:
                for _ in range(args.pages):
                    text = page(shape, sentences, rng)
                    data = text.encode(codec)
                    for name, detect in detectors.items():
                        began = time.process_time()
                        found = detect(data, tld)
                        spent[name] += time.process_time() - began
                        try:
                            ok = found is not None and data.decode(found) == text
                        except (UnicodeDecodeError, LookupError):
                            ok = False
                        for key in ((name, shape), (name, codec)):
                            right[key] += ok
                            seen[key] += 1
    names = list(detectors)
    print(f"pages decoded exactly ({args.pages} per language, code page and shape; every page declares utf-8)")
    print(f"  {'':34s}" + "".join(f"{n:>30s}" for n in names))
    keys = list(SHAPES) + sorted({c for _, _, cs, _ in LANGUAGES for c in cs})
    for key in keys:
        print(f"  {key:34s}" + "".join(f"{right[(n, key)] / seen[(n, key)]:30.3f}" for n in names))
    total = {n: sum(right[(n, s)] for s in SHAPES) / sum(seen[(n, s)] for s in SHAPES) for n in names}
    print(f"  {'all':34s}" + "".join(f"{total[n]:30.3f}" for n in names))
    pages = sum(seen[(names[0], s)] for s in SHAPES)
    print("  CPU ms per page                   " + "".join(f"{spent[n] * 1e3 / pages:30.3f}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
