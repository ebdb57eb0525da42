"""The text models' network: the BERT-family encoder, its layers, heads, pooling and cost models."""
