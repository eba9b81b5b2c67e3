#!/usr/bin/env python3
"""Writes the training text of the trained tiny models: plain English prose in the register of
harness/threeway/corpus.txt (ledgers, rivers, bread, maps, workshops, birds, numbers), generated
from templates written for this project, so it is ours to ship (no licence to track) and the
same bytes come out of the same seed on every machine.

The text has what lets a small model learn quickly and then predict confidently: fixed
phrasings around varying slots, closed sequences (days, months, counting), and sums whose
answers follow from the words before them. A different seed gives text the model never saw:
the held-out text of the margin check (tests/trained_models.rs).

    gen_corpus.py --seed 1 --chars 1200000 > train.txt
    gen_corpus.py --seed 2 --chars 6000 > heldout.txt
"""

import argparse
import random
import sys

NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
           "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
           "eighteen", "nineteen", "twenty"]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
            "tenth", "eleventh", "twelfth"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
DIRECTIONS = ["north", "south", "east", "west", "north-east", "north-west", "south-east",
              "south-west"]
COLOURS = ["red", "green", "white", "yellow", "blue", "grey", "amber", "silver"]
WEATHER = ["calm", "rough", "grey and heavy", "bright", "still as glass", "white with foam",
           "dark and restless", "quiet"]
PEOPLE = ["the keeper", "the baker", "the carpenter", "the mapmaker", "the engineer",
          "the ferryman", "the teacher", "the shepherd", "the clockmaker", "the gardener",
          "the fisherman", "the librarian", "the potter", "the weaver", "the miller"]
NAMES = ["Anna", "Tomas", "Mira", "Jonah", "Elsa", "Peter", "Ruth", "Samuel", "Clara", "Felix",
         "Ida", "Oskar", "Nora", "Hugo", "Lena", "Martin"]
PLACES = ["the harbour", "the old mill", "the market square", "the river bank", "the station",
          "the church tower", "the workshop", "the lighthouse", "the bridge", "the orchard",
          "the library", "the bakery", "the valley", "the hill farm", "the ferry landing"]
TOWNS = ["Ashford", "Brindle", "Carrow", "Dunmore", "Elmsworth", "Fairhaven", "Greystone",
         "Hollins", "Kestrel Bay", "Larkfield", "Millbrook", "Northwick", "Oakham", "Redcliff"]
OBJECTS = ["chair", "table", "clock", "lamp", "boat", "basket", "door", "window frame", "bowl",
           "shelf", "wheel", "ladder", "bench", "box", "map", "bell"]
MATERIALS = ["oak", "pine", "ash", "walnut", "birch", "clay", "iron", "brass", "willow", "wool"]
TOOLS = ["a plane", "a chisel", "a small saw", "a file", "a mallet", "a knife", "a brush",
         "a needle", "a hammer", "a drill"]
BIRDS = ["swallows", "geese", "swifts", "cranes", "starlings", "terns", "storks", "warblers"]
DISHES = [("bread", ["flour", "water", "salt", "yeast"], "bake"),
          ("soup", ["onions", "carrots", "barley", "stock"], "simmer"),
          ("porridge", ["oats", "milk", "salt", "honey"], "stir"),
          ("pancakes", ["flour", "eggs", "milk", "butter"], "fry"),
          ("stew", ["beans", "tomatoes", "garlic", "herbs"], "simmer"),
          ("cake", ["flour", "sugar", "eggs", "butter"], "bake"),
          ("jam", ["plums", "sugar", "lemon", "water"], "boil"),
          ("tea", ["leaves", "water", "milk", "sugar"], "brew")]
TOPICS = ["the new library", "the repair of the bridge", "the summer fair", "the school roof",
          "the price of bread", "the ferry timetable", "the flooding in April", "the town clock",
          "a reading room", "the old orchard", "the harbour wall", "the winter market"]
FEELINGS = ["pleased", "tired", "surprised", "worried", "quiet", "cheerful", "patient", "proud"]
SEASONS = ["spring", "summer", "autumn", "winter"]


def cap(text):
    return text[0].upper() + text[1:]


def number(n):
    return NUMBERS[n] if n < len(NUMBERS) else str(n)


class Prose:
    """One paragraph at a time, each from one of the topic generators."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def pick(self, items):
        return self.r.choice(items)

    def ledger(self):
        r = self.r
        person = self.pick(PEOPLE)
        s = [f"{cap(person)} kept a ledger of every ship that passed {self.pick(PLACES)}."]
        day = r.randrange(len(DAYS))
        for _ in range(r.randint(2, 4)):
            s.append(f"On {DAYS[day % 7]} the wind came from the {self.pick(DIRECTIONS)} and the sea "
                     f"was {self.pick(WEATHER)}.")
            ships = r.randint(1, 9)
            s.append(f"{cap(number(ships))} {'ship' if ships == 1 else 'ships'} passed before "
                     f"midnight, and the lamps of the last one were {self.pick(COLOURS)}.")
            day += 1
        s.append(f"By the end of {self.pick(MONTHS)} the ledger held {number(r.randint(2, 20))} "
                 "new pages.")
        return s

    def river(self):
        r = self.r
        town = self.pick(TOWNS)
        m = r.randrange(9)
        s = [f"The river below {town} does not hurry.",
             f"It rises in {MONTHS[m]}, stays high through {MONTHS[m + 1]} and falls again in "
             f"{MONTHS[m + 2]}.",
             f"Farmers along its banks measure the year by the height of the water, and in "
             f"{self.pick(SEASONS)} children cross it on the stones."]
        if r.random() < 0.5:
            s.append(f"The bridge at {self.pick(TOWNS)} is {number(r.randint(2, 20))} miles "
                     f"{self.pick(DIRECTIONS)} of the mill.")
        return s

    def recipe(self):
        r = self.r
        dish, parts, verb = self.pick(DISHES)
        parts = parts[:]
        r.shuffle(parts)
        minutes = r.choice([5, 10, 15, 20, 30, 40])
        s = [f"To make {dish} at home, mix the {parts[0]}, the {parts[1]}, the {parts[2]} and a "
             f"little {parts[3]}.",
             f"Cover it and leave it for {number(r.randint(2, 6))} hours, then {verb} it for "
             f"{minutes} minutes.",
             f"{cap(self.pick(PEOPLE))} says that good {dish} needs patience more than skill."]
        return s

    def sums(self):
        r = self.r
        s = []
        for _ in range(r.randint(3, 6)):
            a, b = r.randint(0, 10), r.randint(0, 10)
            kind = r.randrange(3)
            if kind == 0:
                s.append(f"{cap(number(a))} and {number(b)} make {number(a + b)}.")
            elif kind == 1 and a >= b:
                s.append(f"{cap(number(a))} take away {number(b)} leaves {number(a - b)}.")
            else:
                a, b = r.randint(1, 4), r.randint(1, 5)
                s.append(f"{cap(number(a))} times {number(b)} is {number(a * b)}.")
        return s

    def counting(self):
        r = self.r
        kind = r.randrange(4)
        if kind == 0:
            start = r.randrange(7)
            seq = [DAYS[(start + i) % 7] for i in range(r.randint(3, 7))]
            return [f"The days went by: {', '.join(seq[:-1])} and {seq[-1]}."]
        if kind == 1:
            start = r.randrange(6)
            seq = [MONTHS[start + i] for i in range(r.randint(3, 6))]
            return [f"The months of the journey were {', '.join(seq[:-1])} and {seq[-1]}."]
        if kind == 2:
            start = r.randrange(1, 8)
            seq = [number(start + i) for i in range(r.randint(4, 8))]
            return [f"{cap(self.pick(NAMES))} counted the boats: {', '.join(seq)}."]
        start = r.randrange(6)
        seq = [ORDINALS[start + i] for i in range(r.randint(3, 6))]
        return [f"They climbed the {', the '.join(seq)} flight of stairs without stopping."]

    def workshop(self):
        r = self.r
        person = self.pick(PEOPLE)
        obj = self.pick(OBJECTS)
        s = [f"The workshop smelled of {self.pick(MATERIALS)} shavings and linseed oil.",
             f"On the bench lay a half-finished {obj} of {self.pick(MATERIALS)}.",
             f"{cap(person)} worked slowly with {self.pick(TOOLS)}, testing each joint, then "
             "testing again."]
        if r.random() < 0.6:
            s.append(f"{cap(person)} said a {obj} should be built to outlive the person who made "
                     "it.")
        return s

    def meeting(self):
        r = self.r
        group = self.pick(["The committee", "The town council", "The school board",
                           "The fishermen's guild", "The village society"])
        s = [f"{group} met on {self.pick(DAYS)} to discuss {self.pick(TOPICS)}.",
             f"Some members wanted {self.pick(TOPICS)}; others argued for {self.pick(TOPICS)}.",
             f"After {number(r.randint(2, 5))} hours they agreed, and adjourned until "
             f"{self.pick(MONTHS)}."]
        return s

    def birds(self):
        birds = self.pick(BIRDS)
        s = [f"In {self.pick(SEASONS)} the {birds} fly {self.pick(DIRECTIONS)} over "
             f"{self.pick(TOWNS)}.",
             f"They navigate by the sun during the day and by the stars at night.",
             f"Young {birds} on their first journey follow the older ones, who remember "
             f"{self.pick(PLACES)} and the lights of {self.pick(TOWNS)}."]
        return s

    def travel(self):
        r = self.r
        a, b = r.sample(TOWNS, 2)
        name = self.pick(NAMES)
        miles = r.randint(3, 20)
        s = [f"{name} walked from {a} to {b}, {number(miles)} miles along the "
             f"{self.pick(DIRECTIONS)} road.",
             f"{name} left on {self.pick(DAYS)} morning and reached {b} before dark, tired but "
             f"{self.pick(FEELINGS)}.",
             f"On the way {name} passed {self.pick(PLACES)} and stopped to eat "
             f"{self.pick(DISHES)[0]}."]
        return s

    def paragraph(self):
        kinds = [self.ledger, self.river, self.recipe, self.sums, self.counting, self.workshop,
                 self.meeting, self.birds, self.travel]
        sentences = []
        for _ in range(self.r.randint(1, 2)):
            sentences += self.pick(kinds)()
        return " ".join(sentences)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--chars", type=int, required=True, help="stop after this many characters")
    args = p.parse_args()
    prose = Prose(args.seed)
    out, n = [], 0
    while n < args.chars:
        para = prose.paragraph()
        out.append(para)
        n += len(para) + 2
    sys.stdout.write("\n\n".join(out) + "\n")


if __name__ == "__main__":
    main()
