"""What a submit is checked against before anything is written: its fields (input), a need turned
into a shape (needs), a gang's placement, and admission under the tenant's lock."""
