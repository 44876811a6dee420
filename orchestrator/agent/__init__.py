"""One agent: the loop, what the model sees, compaction, the prompt, the transcript.

    loop.py         Agent: model call → tool calls → observations, until done
    projection.py   the request computed from the transcript; token estimates
    compaction.py   folding old turns into a summary with the full text kept on disk
    prompt.py       the stable prompt prefix and the per-turn state block
    transcript.py   the durable conversation (``.team/transcripts/<name>.jsonl``)
"""
