package gen

import (
	"unicode"
	"unicode/utf8"
)

// language describes how to make sentences that look like one language:
// which characters its words use, whether words are separated by spaces,
// and how sentences end. The words are invented, but the scripts, byte
// lengths and mix of languages are close to Tatoeba's.
type language struct {
	code   string
	weight int // relative share of sentences

	// Words are strings of syllables. With consonants set, a syllable is an
	// optional onset consonant, a vowel and an optional coda consonant
	// (onset always present when onset is true); without consonants, a
	// syllable is one character from vowels (CJK, kana, Hangul).
	consonants []rune
	vowels     []rune
	onset      bool
	minSyl     int
	maxSyl     int

	spaced bool     // words separated by spaces
	stops  []string // sentence endings
	comma  string   // clause separator ("" for none)

	vocab [][]byte // built by init
}

const vocabSize = 2048

// Letters repeat in these strings to weight how often they are drawn.
// Entries without letters are filled in by init (other scripts).
var languages = []*language{
	latin("eng", 160, "ttttnnnnsssshhhrrrrddllcmwfgypbvk", "eeeeaaaooiiuuy", 1, 3),
	{code: "rus", weight: 90},
	latin("ita", 80, "rrrnnnttlllsscccdmpvgzbf", "eeeaaaiiioooou", 1, 4),
	latin("tur", 70, "rrnnkklldmystbzşçğgcpvh", "aaaeeeıııiiouüö", 1, 4),
	latin("epo", 65, "nnrrlsstkdmpvjĝĉŝĵbfgĥz", "aaaeeoooiiuŭ", 1, 4),
	latin("deu", 60, "nnnrrrsssttthhdlgmcbwfkzüäößp", "eeeeiiaaauoö", 1, 3),
	latin("fra", 50, "ssnnrrttllddcmpvqgfbhjç", "eeeeaaiiuuoéèàêâ", 1, 3),
	latin("por", 40, "ssrrnnddmmttcllpvgbfçqzjx", "aaaeeeoooiiuãõéáí", 1, 4),
	latin("spa", 40, "ssnnrrlldddcctmpbgvyqzfhjñ", "eeeaaaoooiiuáéíóú", 1, 4),
	latin("hun", 35, "ttnnllkkssrrzzmgydbvjhpcf", "eeeaaaáéoöőiíuüű", 1, 4),
	latin("ber", 25, "nnttyyddrrlsmkɣɛḍṭẓgfwbqxz", "aaaiiuee", 1, 4),
	latin("fin", 18, "nnttssllkkvvmmrhjpd", "aaaiiieeeuuooäyö", 2, 5),
	latin("pol", 15, "zzrrnnwwcckkssttdmpłjlbęąśżćńgh", "iiieeaaoouyó", 1, 4),
	latin("nld", 15, "nnnttrrddsslghkmvwjbzp", "eeeeaaaiiooouij", 1, 3),
	{code: "ukr", weight: 20},
	{code: "jpn", weight: 25},
	{code: "cmn", weight: 20},
	{code: "kor", weight: 5},
	{code: "heb", weight: 25},
	{code: "ara", weight: 8},
	{code: "ell", weight: 5},
	{code: "hin", weight: 4},
}

func latin(code string, weight int, consonants, vowels string, minSyl, maxSyl int) *language {
	return &language{
		code: code, weight: weight,
		consonants: []rune(consonants), vowels: []rune(vowels),
		minSyl: minSyl, maxSyl: maxSyl,
		spaced: true, stops: []string{".", ".", ".", "?", "!"}, comma: ",",
	}
}

// runeRange returns every step-th code point in [lo, hi].
func runeRange(lo, hi rune, step int) []rune {
	var rs []rune
	for r := lo; r <= hi; r += rune(step) {
		rs = append(rs, r)
	}
	return rs
}

func init() {
	for i, l := range languages {
		switch l.code {
		case "rus":
			*l = *latin(l.code, l.weight, "ннттссррввллккммддппзбгчйхжшщцф", "оооеееаааииыуяюэ", 1, 4)
		case "ukr":
			*l = *latin(l.code, l.weight, "ннттррссввллккммддппзбгчйхжшщцґф", "оооаааиииееіуяюєї", 1, 4)
		case "ell":
			*l = *latin(l.code, l.weight, "ττννσσρρκκλλμμπδγθχφβζξψ", "αααεεεοοοιιηυωάέίόύήώ", 1, 4)
		case "heb":
			*l = *latin(l.code, l.weight, "בגדהזחטכלמנסעפצקרשת", "אויה", 1, 3)
		case "ara":
			*l = *latin(l.code, l.weight, "بتثجحخدذرزسشصضطظعغفقكلمنه", "اوي", 1, 3)
			l.stops, l.comma = []string{".", ".", "؟", "!"}, "،"
		case "hin":
			*l = *latin(l.code, l.weight, "कखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह", "ािीुूेैोौं", 1, 3)
			l.onset = true
			l.stops = []string{"।", "।", "?"}
		case "cmn":
			// Every seventh CJK unified ideograph of the common block.
			l.vowels = runeRange(0x4E00, 0x9FA5, 7)
			l.minSyl, l.maxSyl = 1, 3
			l.stops, l.comma = []string{"。", "。", "？", "！"}, "，"
		case "jpn":
			kana := runeRange(0x3041, 0x3093, 1)
			// Kana twice as likely as kanji.
			l.vowels = append(append(kana, kana...), runeRange(0x4E00, 0x9FA5, 61)...)
			l.minSyl, l.maxSyl = 1, 4
			l.stops, l.comma = []string{"。", "。", "？"}, "、"
		case "kor":
			l.vowels = runeRange(0xAC00, 0xD7A3, 13)
			l.minSyl, l.maxSyl = 1, 4
			l.spaced = true
			l.stops, l.comma = []string{".", ".", "?"}, ","
		}
		l.vocab = buildVocab(l, uint64(i)+1)
	}
}

// buildVocab makes a fixed word list for l. It does not depend on the
// generator's seed, so every data set speaks the same "languages".
func buildVocab(l *language, stream uint64) [][]byte {
	r := newRNG(0x5eed, stream)
	seen := make(map[string]bool, vocabSize)
	words := make([][]byte, 0, vocabSize)
	for tries := 0; len(words) < vocabSize && tries < vocabSize*20; tries++ {
		var w []byte
		n := r.between(l.minSyl, l.maxSyl)
		for range n {
			if len(l.consonants) == 0 {
				w = utf8.AppendRune(w, l.vowels[r.intn(len(l.vowels))])
				continue
			}
			if l.onset || r.intn(10) < 8 {
				w = utf8.AppendRune(w, l.consonants[r.intn(len(l.consonants))])
			}
			w = utf8.AppendRune(w, l.vowels[r.intn(len(l.vowels))])
			if r.intn(10) < 3 {
				w = utf8.AppendRune(w, l.consonants[r.intn(len(l.consonants))])
			}
		}
		if seen[string(w)] {
			continue
		}
		seen[string(w)] = true
		words = append(words, w)
	}
	return words
}

// langPicker draws languages by weight.
type langPicker struct {
	cum   []int
	total int
}

func newLangPicker() *langPicker {
	p := &langPicker{}
	for _, l := range languages {
		p.total += l.weight
		p.cum = append(p.cum, p.total)
	}
	return p
}

func (p *langPicker) pick(r *rng) *language {
	x := r.intn(p.total)
	for i, c := range p.cum {
		if x < c {
			return languages[i]
		}
	}
	return languages[len(languages)-1]
}

// textLength draws a target length in bytes: mostly 20–120, with a long
// tail to several KB. Some of the tail is longer than a 4 KiB page.
func textLength(r *rng) int {
	switch u := r.intn(1000); {
	case u < 900:
		return 20 + (r.intn(101)+r.intn(101))/2
	case u < 985:
		return r.between(121, 400)
	case u < 998:
		return r.between(401, 2000)
	default:
		return r.between(2001, 6000)
	}
}

// appendText appends a sentence of about n bytes in language l to b. The
// result is valid UTF-8 and starts with an upper-case letter where the
// script has case.
func appendText(b []byte, r *rng, l *language, n int) []byte {
	start := len(b)
	stop := l.stops[r.intn(len(l.stops))]
	v := len(l.vocab)
	for first := true; len(b)-start+len(stop) < n; first = false {
		if !first {
			if l.comma != "" && r.intn(14) == 0 {
				b = append(b, l.comma...)
			}
			if l.spaced {
				b = append(b, ' ')
			}
		}
		// The product of two uniform draws favours low indexes, so a few
		// words are common and most are rare, as in real text.
		w := l.vocab[r.intn(v)*r.intn(v)/v]
		if first {
			c, size := utf8.DecodeRune(w)
			if u := unicode.ToUpper(c); u != c {
				b = utf8.AppendRune(b, u)
				b = append(b, w[size:]...)
				continue
			}
		}
		b = append(b, w...)
	}
	return append(b, stop...)
}
