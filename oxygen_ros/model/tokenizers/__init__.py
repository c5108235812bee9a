"""The prompt tokenizers (SentencePiece and Hugging Face) and the prompt layout built with them."""
