"""Reading input rows and writing scored output: file formats only, no models."""
