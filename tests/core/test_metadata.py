"""core.metadata.section: the one reader of a JSON-object metadata key, lenient with hand-written metadata."""

from attnviz.core import metadata as md


def test_section_reads_objects_and_treats_anything_else_as_missing():
    props = {
        "attnviz.special": '{"bos": 1, "eos": 2}',
        "attnviz.image": "[224, 224]",  # valid JSON, but not an object
        "attnviz.inputs": "{not json",  # kept as the raw string by parse
        "attnviz.task": "translation",
    }
    meta = md.parse(props)
    assert md.section(meta, "special") == {"bos": 1, "eos": 2}
    assert md.section(meta, "image") == {}
    assert md.section(meta, "inputs") == {}
    assert md.section(meta, "config") == {}  # absent
    assert md.section(md.section(meta, "config"), "model").get("arch") is None  # nested reads stay safe
